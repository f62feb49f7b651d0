// The management client: one AMQP connection over a WebSocket (rhea) to a router, requests to
// its `$management` agent, or to another router's agent at `amqp:/_topo/0/<id>/$management`
// (as `qdstat -r` does). Replies come back on one dynamic receiver, matched by correlation id.
import rhea from 'rhea/dist/rhea-umd.js';

export const REQUEST_TIMEOUT_MS = 5000;

export class ManagementError extends Error {
  constructor(status, description) {
    super(`${status} ${description || ''}`.trim());
    this.status = status;
    this.description = description;
  }
}

/** `amqp:/_topo/0/<id>/$management` (an edge router's: `amqp:/_edge/<id>/$management`), or
 *  `$management` for the connected router. */
export function managementAddress(routerId, ownId, edge = false) {
  if (!routerId || routerId === ownId) return '$management';
  // an edge router is reached through its interior by its edge address (1.19's console too)
  if (edge) return `amqp:/_edge/${routerId}/$management`;
  return `amqp:/_topo/0/${routerId}/$management`;
}

/** The default WebSocket URL: the page's own host and port, ws or wss as the page. */
export function defaultUrl(loc = window.location) {
  const scheme = loc.protocol === 'https:' ? 'wss' : 'ws';
  return `${scheme}://${loc.host || '127.0.0.1:8672'}/`;
}

/** Accepts `host:port`, `ws://host:port/path` or `wss://...`; returns a ws(s) URL. */
export function normaliseUrl(text) {
  const value = (text || '').trim();
  if (!value) throw new Error('enter the router address, e.g. 127.0.0.1:8672');
  if (/^wss?:\/\//i.test(value)) return value;
  if (/^https?:\/\//i.test(value)) return value.replace(/^http/i, 'ws');
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) {
    throw new Error(`the console speaks AMQP over WebSockets: use ws://, wss:// or host:port, not ${value.split(':')[0]}://`);
  }
  return `ws://${value}${value.includes('/') ? '' : '/'}`;
}

export class Management {
  constructor() {
    this.container = null;
    this.connection = null;
    this.receiver = null;
    this.replyTo = null;
    this.senders = new Map();
    this.pending = new Map();
    this.nextId = 1;
    this.url = null;
    this.listeners = new Set();
    this.closedByUser = false;
  }

  /** Called with ('disconnected', reason) when the connection drops. */
  onEvent(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  emit(kind, detail) {
    for (const fn of this.listeners) fn(kind, detail);
  }

  /** Open the connection and the reply receiver; resolves with the connection's container id. */
  connect(url, { username, password, timeoutMs = 10000 } = {}) {
    this.url = url;
    this.closedByUser = false;
    const container = rhea.create_container({ id: `qdrouter-console-${Math.random().toString(16).slice(2, 10)}` });
    this.container = container;
    const ws = container.websocket_connect(window.WebSocket);
    const options = {
      connection_details: ws(url, ['amqp']),
      reconnect: false,
      idle_time_out: 60000,
    };
    if (username) {
      options.username = username;
      if (password) options.password = password;
    }
    return new Promise((resolve, reject) => {
      let settled = false;
      const fail = (message) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        try { connection.close(); } catch (e) { /* already gone */ }
        reject(new Error(message));
      };
      const timer = setTimeout(() => fail(`no answer from ${url} within ${timeoutMs / 1000} s`), timeoutMs);
      const connection = container.connect(options);
      this.connection = connection;
      connection.on('receiver_open', (context) => {
        if (context.receiver !== this.receiver || settled) return;
        this.replyTo = context.receiver.source.address;
        settled = true;
        clearTimeout(timer);
        resolve(context.connection.remote.open ? context.connection.remote.open.container_id : '');
      });
      connection.on('message', (context) => this.onReply(context.message));
      connection.on('connection_error', (context) => {
        const error = context.connection.error;
        fail(`connection refused: ${error ? (error.description || error.condition) : 'error'}`);
      });
      connection.on('sender_error', (context) => {
        const error = context.sender.error;
        this.failSender(context.sender, error ? (error.description || error.condition) : 'sender closed');
      });
      connection.on('sender_close', (context) => this.failSender(context.sender, 'sender closed by the router'));
      connection.on('disconnected', (context) => {
        // a WebSocket's error is a bare Event: it says nothing more than "failed"
        const reason = context.error && context.error.message ? context.error.message : 'connection closed';
        if (!settled) {
          fail(`cannot reach ${url}: ${context.error && !context.error.message
            ? 'the WebSocket could not be opened (is it a listener with http: yes?)'
            : reason === 'connection closed' ? 'the WebSocket closed (is it a listener with http: yes?)' : reason}`);
          return;
        }
        this.dropAll(`disconnected: ${reason}`);
        if (!this.closedByUser) this.emit('disconnected', reason);
      });
      this.receiver = connection.open_receiver({ source: { dynamic: true }, credit_window: 200 });
    });
  }

  close() {
    this.closedByUser = true;
    this.dropAll('closed');
    if (this.connection) {
      try { this.connection.close(); } catch (e) { /* already gone */ }
    }
    this.connection = null;
    this.senders.clear();
  }

  get connected() {
    return !!(this.connection && this.connection.is_open() && this.replyTo);
  }

  dropAll(reason) {
    for (const [, entry] of this.pending) {
      clearTimeout(entry.timer);
      entry.reject(new Error(reason));
    }
    this.pending.clear();
  }

  failSender(sender, reason) {
    for (const [address, s] of this.senders) {
      if (s === sender) this.senders.delete(address);
    }
    for (const [id, entry] of this.pending) {
      if (entry.sender === sender) {
        clearTimeout(entry.timer);
        this.pending.delete(id);
        entry.reject(new Error(reason));
      }
    }
  }

  sender(address) {
    let s = this.senders.get(address);
    if (!s || s.is_closed()) {
      s = this.connection.open_sender({ target: { address } });
      s.queue = [];
      s.on('sendable', () => this.drain(s));
      this.senders.set(address, s);
    }
    return s;
  }

  /** Send what waits on ``sender`` while it has credit (requests that timed out are dropped). */
  drain(sender) {
    while (sender.queue.length && sender.sendable()) {
      const { id, message } = sender.queue.shift();
      if (this.pending.has(id)) sender.send(message);
    }
  }

  onReply(message) {
    const id = message.correlation_id;
    const entry = this.pending.get(id);
    if (!entry) return; // a late answer to a request that timed out
    this.pending.delete(id);
    clearTimeout(entry.timer);
    const props = message.application_properties || {};
    const status = Number(props.statusCode ?? 500);
    if (status >= 300) {
      entry.reject(new ManagementError(status, props.statusDescription));
    } else {
      entry.resolve(message.body);
    }
  }

  /** One management request; resolves with the reply body, rejects with ManagementError. */
  request(address, operation, properties = {}, body = {}, timeoutMs = REQUEST_TIMEOUT_MS) {
    if (!this.connected) return Promise.reject(new Error('not connected'));
    const id = this.nextId++;
    const sender = this.sender(address);
    const appProps = { operation };
    for (const [key, value] of Object.entries(properties)) {
      if (value !== undefined && value !== null) appProps[key] = value;
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        sender.queue = sender.queue.filter((q) => q.id !== id); // never sent: no credit came
        reject(new Error(`no answer from ${address} to ${operation} within ${timeoutMs / 1000} s`));
      }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer, sender });
      const message = { to: address, reply_to: this.replyTo, correlation_id: id, application_properties: appProps, body };
      sender.queue.push({ id, message });
      this.drain(sender);
    });
  }

  /** QUERY one entity type; resolves with an array of objects (attribute -> value). */
  async query(address, entityType, attributeNames = []) {
    const body = await this.request(address, 'QUERY', { entityType }, { attributeNames });
    const names = (body && body.attributeNames) || [];
    return ((body && body.results) || []).map((row) => {
      const entity = {};
      names.forEach((name, i) => { entity[name] = row[i]; });
      return entity;
    });
  }
}
