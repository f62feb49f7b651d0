// The connect form: which router to talk to (its http listener), optional SASL credentials.
import { h } from '../dom.js';
import { defaultUrl } from '../mgmt.js';

export function connectPage(app) {
  return {
    mount(el) {
      const address = h('input', {
        id: 'address', name: 'address', type: 'text', autocomplete: 'url', spellcheck: 'false',
        value: app.lastUrl(), placeholder: defaultUrl(), required: true,
      });
      const username = h('input', { id: 'username', name: 'username', type: 'text', autocomplete: 'username' });
      const password = h('input', { id: 'password', name: 'password', type: 'password', autocomplete: 'current-password' });
      const autostart = h('input', { id: 'autostart', type: 'checkbox', checked: app.autostart() });
      const message = h('p', { class: 'form-error', role: 'alert', 'data-testid': 'connect-error' }, app.lostReason || '');
      app.lostReason = null;
      const button = h('button', { type: 'submit', class: 'primary', 'data-testid': 'connect' }, 'Connect');
      const form = h('form', {
        class: 'card connect',
        onsubmit: async (ev) => {
          ev.preventDefault();
          button.disabled = true;
          button.textContent = 'Connecting\u2026';
          message.textContent = '';
          app.setAutostart(autostart.checked);
          try {
            await app.connect(address.value, { username: username.value.trim(), password: password.value });
          } catch (e) {
            message.textContent = e.message;
            button.disabled = false;
            button.textContent = 'Connect';
          }
        },
      },
      h('h1', {}, 'Connect to a router'),
      h('p', { class: 'muted' },
        'The console talks AMQP 1.0 over a WebSocket to a router\u2019s http listener and asks its management agent (and, through it, every other router of the network) what it knows.'),
      h('label', { for: 'address' }, 'Router address'),
      address,
      h('p', { class: 'hint' }, 'ws://host:port/ or host:port of a listener with ', h('code', {}, 'http: yes'), '; wss:// when it has an sslProfile.'),
      h('details', { class: 'credentials' },
        h('summary', {}, 'Credentials (optional)'),
        h('label', { for: 'username' }, 'User name'), username,
        h('label', { for: 'password' }, 'Password'), password,
        h('p', { class: 'hint' }, 'SASL PLAIN with a password, ANONYMOUS without a user name.')),
      message,
      h('div', { class: 'actions' },
        h('label', { class: 'toggle', for: 'autostart' }, autostart, ' Connect to this address automatically next time'),
        button));
      el.append(h('div', { class: 'connect-wrap' }, form));
      address.focus();
      // Autostart: connect at once to the address used last time (not after a lost connection)
      if (app.autostart() && !app.triedAutostart && !message.textContent) {
        app.triedAutostart = true;
        form.requestSubmit();
      }
      app.triedAutostart = true;
    },
  };
}
