// The console's shell: connection, navigation between pages (#/overview, #/topology, ...) and
// the status line. Pages are objects with mount(el), and an optional unmount().
import { h, replace } from './dom.js';
import { Management, defaultUrl, normaliseUrl } from './mgmt.js';
import { Network } from './network.js';
import { ChartStore } from './charts.js';
import { connectPage } from './pages/connect.js';
import { overviewPage } from './pages/overview.js';
import { topologyPage } from './pages/topology.js';
import { listPage } from './pages/list.js';
import { chartsPage } from './pages/charts.js';
import { schemaPage } from './pages/schema.js';

const PAGES = [
  { path: 'overview', title: 'Overview', make: overviewPage },
  { path: 'topology', title: 'Topology', make: topologyPage },
  { path: 'list', title: 'List', make: listPage },
  { path: 'charts', title: 'Charts', make: chartsPage },
  { path: 'schema', title: 'Schema', make: schemaPage },
];
const LAST_URL_KEY = 'qdrouter-console.url';
const AUTOSTART_KEY = 'qdrouter-console.autostart';

export const app = {
  mgmt: null,
  network: null,
  charts: null,
  url: null,
  page: null,
  wanted: null, // the page asked for before connecting

  async connect(text, credentials = {}) {
    const url = normaliseUrl(text);
    this.disconnect();
    const mgmt = new Management();
    await mgmt.connect(url, credentials);
    const network = new Network(mgmt);
    try {
      await network.start();
    } catch (e) {
      mgmt.close();
      throw new Error(`connected, but the router's management agent did not answer: ${e.message}`);
    }
    this.mgmt = mgmt;
    this.network = network;
    this.url = url;
    try { localStorage.setItem(LAST_URL_KEY, url); } catch (e) { /* not remembered */ }
    this.charts = this.charts || new ChartStore(mgmt);
    this.charts.mgmt = mgmt;
    this.charts.addressOf = (id) => network.address(id); // (edge routers by their edge address)
    this.charts.start(network.ownId, url);
    mgmt.onEvent((kind, reason) => {
      if (kind === 'disconnected') this.lost(reason);
    });
    network.on(() => renderStatus());
    renderStatus();
    const target = this.wanted && this.wanted !== 'connect' ? this.wanted : 'overview';
    this.wanted = null;
    navigate(target);
  },

  disconnect() {
    if (this.network) this.network.stop();
    if (this.charts) this.charts.stop();
    if (this.mgmt) this.mgmt.close();
    this.mgmt = null;
    this.network = null;
    renderStatus();
  },

  lost(reason) {
    const url = this.url;
    this.disconnect();
    this.lostReason = `Lost the connection to ${url}: ${reason}`;
    navigate('connect');
  },

  autostart() {
    try { return localStorage.getItem(AUTOSTART_KEY) === 'yes'; } catch (e) { return false; }
  },

  setAutostart(on) {
    try { localStorage.setItem(AUTOSTART_KEY, on ? 'yes' : 'no'); } catch (e) { /* not remembered */ }
  },

  lastUrl() {
    try { return localStorage.getItem(LAST_URL_KEY) || defaultUrl(); } catch (e) { return defaultUrl(); }
  },
};

function currentPath() {
  const m = /^#\/([a-z]+)/.exec(window.location.hash);
  return m ? m[1] : '';
}

function navigate(path) {
  if (currentPath() === path) route();
  else window.location.hash = `#/${path}`;
}

function renderNav() {
  const path = currentPath();
  const nav = document.getElementById('nav');
  replace(nav, PAGES.map((p) => h('a', {
    href: `#/${p.path}`,
    class: path === p.path ? 'active' : '',
    'aria-current': path === p.path ? 'page' : false,
    'data-page': p.path,
  }, p.title)));
  nav.hidden = !app.network;
}

function renderStatus() {
  const el = document.getElementById('status');
  if (!app.network) {
    replace(el, h('span', { class: 'dot off' }), 'not connected');
    return;
  }
  const t = app.network.totals();
  replace(el,
    h('span', { class: `dot ${app.network.error ? 'warn' : 'on'}`, title: app.network.error || 'connected' }),
    h('span', { class: 'conn', title: app.url, 'data-testid': 'status-router' }, app.network.ownId),
    h('span', { class: 'muted' }, ` \u00b7 ${t.routers} router${t.routers === 1 ? '' : 's'}`),
    h('button', { class: 'link', onclick: () => { app.disconnect(); navigate('connect'); } }, 'Disconnect'));
}

function route() {
  let path = currentPath();
  if (!app.network && path !== 'connect') {
    if (path) app.wanted = path;
    path = 'connect';
    if (window.location.hash !== '#/connect') {
      window.location.hash = '#/connect';
      return;
    }
  }
  if (app.network && (path === '' || !PAGES.some((p) => p.path === path) && path !== 'connect')) {
    navigate('overview');
    return;
  }
  if (app.page && app.page.unmount) app.page.unmount();
  const main = document.getElementById('main');
  main.replaceChildren();
  main.dataset.page = path;
  const spec = PAGES.find((p) => p.path === path);
  document.title = `${spec ? spec.title : 'Connect'} \u00b7 qdrouter console`;
  app.page = path === 'connect' ? connectPage(app) : spec.make(app);
  app.page.mount(main);
  renderNav();
}

window.addEventListener('hashchange', route);
window.addEventListener('DOMContentLoaded', () => {
  renderStatus();
  route();
});
