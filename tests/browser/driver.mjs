// A headless Chromium driven by Playwright (playwright-core from console/node_modules, the
// system's Chromium: no browser is ever downloaded), controlled line by line from a Python test:
// each stdin line is a JSON command {id, op, ...}; each stdout line answers {id, ok, value} or
// {id, ok: false, error}. Every wait has a timeout; the browser closes when stdin closes.
//
//   node driver.mjs CONSOLE_DIR CHROMIUM USER_DATA_DIR
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const [consoleDir, executablePath, userDataDir] = process.argv.slice(2);
const require = createRequire(join(consoleDir, 'package.json'));
const { chromium } = require('playwright-core');

// headless: true makes Playwright pass --headless itself
const FLAGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

const errors = [];
let context;
let page;

function reply(obj) {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

const ops = {
  async goto({ url, timeout }) {
    const response = await page.goto(url, { timeout, waitUntil: 'load' });
    return response ? response.status() : null;
  },
  async click({ selector, timeout }) {
    await page.click(selector, { timeout });
  },
  async fill({ selector, value, timeout }) {
    await page.fill(selector, value, { timeout });
  },
  async select({ selector, value, timeout }) {
    return page.selectOption(selector, value, { timeout });
  },
  async wait({ selector, state, timeout }) {
    await page.waitForSelector(selector, { state: state || 'visible', timeout });
  },
  // wait until a JavaScript expression (a function body returning a value) is truthy
  async waitFn({ body, arg, timeout }) {
    const handle = await page.waitForFunction(new Function('arg', body), arg, { timeout, polling: 250 });
    return handle.jsonValue();
  },
  async eval({ body, arg }) {
    return page.evaluate(new Function('arg', body), arg);
  },
  async count({ selector }) {
    return page.locator(selector).count();
  },
  async texts({ selector }) {
    return page.locator(selector).allInnerTexts();
  },
  async screenshot({ path, fullPage }) {
    await page.screenshot({ path, fullPage: !!fullPage });
    return path;
  },
  async errors() {
    return errors.splice(0);
  },
};

async function main() {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    args: FLAGS,
    viewport: { width: 1400, height: 900 },
    timeout: 60000,
  });
  page = context.pages()[0] || await context.newPage();
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(`console: ${m.text()}`); });
  reply({ id: 0, ok: true, value: context.browser() ? context.browser().version() : 'chromium' });

  const rl = createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (!line.trim()) continue;
    let cmd;
    try {
      cmd = JSON.parse(line);
      const fn = ops[cmd.op];
      if (!fn) throw new Error(`unknown op ${cmd.op}`);
      const value = await fn(cmd);
      reply({ id: cmd.id, ok: true, value: value === undefined ? null : value });
    } catch (e) {
      reply({ id: cmd ? cmd.id : null, ok: false, error: String(e && e.message ? e.message : e) });
    }
  }
  await context.close();
}

main().catch(async (e) => {
  reply({ id: 0, ok: false, error: String(e && e.stack ? e.stack : e) });
  try { if (context) await context.close(); } catch (_) { /* closing after a failure */ }
  process.exitCode = 1;
});
