// Weir's dashboard: plain ES modules, no build step. Every figure comes
// from the coordinator's REST API (`/v1/...`), which asks for the cluster
// token when one is set; the token is kept for the browser tab only.
import dagre from './vendor/dagre.esm.js';

const main = document.getElementById('main');
const statusLine = document.getElementById('status');
let refresh = null;

// ---------------------------------------------------------------- API

function savedToken() {
  return sessionStorage.getItem('weir-token');
}

async function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
  const token = savedToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401) {
    await login();
    return api(path, options);
  }
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = text;
  }
  if (!response.ok) {
    throw new Error(body && body.error ? body.error : `${response.status} ${response.statusText}`);
  }
  return body;
}

let loggingIn = null;

/** Ask for the token until the coordinator takes it. */
function login() {
  if (loggingIn) return loggingIn;
  const dialog = document.getElementById('login');
  const form = document.getElementById('login-form');
  loggingIn = new Promise((resolve) => {
    form.onsubmit = async (event) => {
      event.preventDefault();
      const token = document.getElementById('token').value.trim();
      const probe = await fetch('/v1/overview', { headers: { Authorization: `Bearer ${token}` } });
      if (probe.status === 401) {
        document.getElementById('login-error').textContent = 'The coordinator refused that token.';
        return;
      }
      sessionStorage.setItem('weir-token', token);
      dialog.close();
      loggingIn = null;
      resolve();
    };
    dialog.showModal();
  });
  return loggingIn;
}

// ---------------------------------------------------------------- helpers

/** An element: `h('td', {class: 'num'}, 'text', child, ...)`. */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function table(headers, rows, attrs = {}) {
  return h('table', attrs,
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))),
    h('tbody', {}, rows));
}

const fmt = {
  count: (n) => (n === undefined || n === null ? '–' : Math.round(n).toLocaleString('en')),
  rate: (n) => (n === undefined || n === null ? '–' : `${Math.round(n).toLocaleString('en')}/s`),
  bytes(n) {
    if (n === undefined || n === null || n < 0) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
  },
  ms: (n) => (n === undefined || n === null || n < 0 ? '–' : n < 1000 ? `${n} ms` : `${(n / 1000).toFixed(1)} s`),
  time: (ms) => (ms ? new Date(ms).toISOString().replace('T', ' ').replace('Z', '') : '–'),
  watermark(ms) {
    if (ms === undefined || ms === null || !Number.isFinite(ms) || ms < -8e15) return 'none yet';
    return fmt.time(ms);
  },
};

function status(s) {
  return h('span', { class: `status-${s}`, 'data-test': 'job-status' }, s);
}

function show(...nodes) {
  main.replaceChildren(...nodes);
}

function failure(e) {
  return h('p', { class: 'error' }, String(e.message || e));
}

/** Re-run `draw` every `ms` while this page is shown. */
function every(ms, draw) {
  clearInterval(refresh);
  const tick = async () => {
    try {
      await draw();
      statusLine.textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      statusLine.textContent = String(e.message || e);
    }
  };
  refresh = setInterval(tick, ms);
  return tick();
}

// ---------------------------------------------------------------- overview

async function overview() {
  const cards = h('div', { class: 'cards' });
  const workers = h('div');
  const jobs = h('div');
  const sqlError = h('p', { class: 'error', 'data-test': 'sql-error' });
  const script = h('textarea', {
    id: 'sql', 'data-test': 'sql',
    placeholder: "CREATE TABLE ... WITH ('connector' = ...);\nINSERT INTO ... SELECT ...;",
  });
  const submit = h('button', {
    class: 'primary', 'data-test': 'sql-submit',
    onclick: async () => {
      sqlError.textContent = '';
      try {
        const r = await api('/v1/sql', { method: 'POST', body: script.value });
        location.hash = `#/jobs/${r.job_id}`;
      } catch (e) {
        sqlError.textContent = String(e.message || e);
      }
    },
  }, 'Submit');
  show(
    h('h1', {}, 'Cluster'), cards,
    h('h2', {}, 'Jobs'), jobs,
    h('h2', {}, 'Workers'), workers,
    h('h2', {}, 'Submit a SQL script'), script, h('div', { class: 'toolbar' }, submit), sqlError,
  );
  await every(1000, async () => {
    const [o, w, j] = await Promise.all([api('/v1/overview'), api('/v1/workers'), api('/v1/jobs')]);
    const card = (value, label) => h('div', { class: 'card' }, h('b', {}, value), h('span', {}, label));
    cards.replaceChildren(
      card(o.workers, 'workers'),
      card(`${o.slots_total - o.slots_free} / ${o.slots_total}`, 'slots used'),
      card(o.jobs_running, 'running'),
      card(o.jobs_finished, 'finished'),
      card(o.jobs_failed, 'failed'),
      card(o.jobs_canceled, 'canceled'),
    );
    workers.replaceChildren(table(
      ['worker', 'address', 'slots', 'used', 'last heartbeat'],
      w.map((x) => h('tr', {},
        h('td', {}, x.id, x.lost ? ' (lost)' : ''), h('td', {}, x.address),
        h('td', { class: 'num' }, x.slots), h('td', { class: 'num' }, x.slots_used),
        h('td', { class: 'num' }, fmt.ms(x.last_heartbeat_ms_ago), ' ago'))),
    ));
    jobs.replaceChildren(table(
      ['job', 'status', 'submitted', 'ended'],
      j.slice().reverse().map((x) => h('tr', { 'data-test': 'job-row' },
        h('td', {}, h('a', { href: `#/jobs/${x.id}` }, x.name), h('br'), h('small', {}, x.id)),
        h('td', {}, status(x.status)),
        h('td', {}, fmt.time(x.submitted_at_ms)), h('td', {}, fmt.time(x.ended_at_ms)))),
    ));
  });
}

// ---------------------------------------------------------------- a job

const TABS = [['', 'Graph'], ['checkpoints', 'Checkpoints'], ['exceptions', 'Exceptions'], ['config', 'Configuration']];

async function job(id, tab = '') {
  const head = h('div');
  const body = h('div');
  const note = h('p', { 'data-test': 'action-result' });
  const tabs = h('div', { class: 'tabs' }, TABS.map(([t, label]) => h('a', {
    href: `#/jobs/${id}${t ? `/${t}` : ''}`, class: t === tab ? 'active' : undefined, 'data-test': `tab-${t || 'graph'}`,
  }, label)));
  const act = (label, cls, path, payload, done) => h('button', {
    class: cls, 'data-test': label.toLowerCase().replace(/ /g, '-'),
    onclick: async () => {
      if (!confirm(`${label}: job ${id}?`)) return;
      try {
        const r = await api(path, { method: 'POST', body: payload ? JSON.stringify(payload) : '' });
        note.textContent = done(r);
      } catch (e) {
        note.textContent = String(e.message || e);
      }
    },
  }, label);
  show(head, h('div', { class: 'toolbar' },
    act('Cancel', 'danger', `/v1/jobs/${id}/cancel`, null, (r) => `cancel requested: ${r.status}`),
    act('Stop with savepoint', '', `/v1/jobs/${id}/savepoints`, { stop: true }, (r) => `savepoint at ${r.path}`),
    note), tabs, body);
  const drawHead = (j) => head.replaceChildren(
    h('h1', {}, j.name, ' ', status(j.status)),
    h('p', {}, `job ${j.id} · restarts ${j.restarts} · submitted ${fmt.time(j.submitted_at_ms)}`,
      j.failure ? h('span', { class: 'error' }, h('br'), j.failure) : null),
  );
  const pages = { '': graphTab, checkpoints: checkpointsTab, exceptions: exceptionsTab, config: configTab };
  const page = pages[tab] || graphTab;
  const state = {};
  await every(1000, async () => {
    const j = await api(`/v1/jobs/${id}`);
    drawHead(j);
    await page(id, j, body, state);
  });
}

/** Sum, max or min of a vertex's subtask metrics, by id. */
async function vertexMetrics(id, vid) {
  const ids = 'numRecordsInPerSecond,numRecordsOutPerSecond,backPressuredTimeMsPerSecond,busyTimeMsPerSecond,currentInputWatermark';
  const rows = await api(`/v1/jobs/${id}/vertices/${vid}/subtasks/metrics?get=${ids}`);
  const m = {};
  for (const r of rows) m[r.id] = r;
  return m;
}

function colour(backPressured) {
  if (backPressured >= 500) return ['#fde2e1', '#cf222e'];
  if (backPressured >= 100) return ['#fff4d6', '#d29922'];
  return ['#e6f4ea', '#2da44e'];
}

async function graphTab(id, j, body, state) {
  state.plan = state.plan || (await api(`/v1/jobs/${id}/plan`)).plan.nodes;
  const live = !['FINISHED', 'FAILED', 'CANCELED'].includes(j.status);
  const metrics = live ? await Promise.all(j.vertices.map((v) => vertexMetrics(id, v.id))) : [];
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: 'LR', nodesep: 28, ranksep: 70, marginx: 16, marginy: 16 });
  g.setDefaultEdgeLabel(() => ({}));
  const lines = (node) => {
    const m = metrics[node.id] || {};
    const out = [
      `parallelism ${node.parallelism}`,
      `in ${fmt.rate(m.numRecordsInPerSecond && m.numRecordsInPerSecond.sum)} · out ${fmt.rate(m.numRecordsOutPerSecond && m.numRecordsOutPerSecond.sum)}`,
      `busy ${fmt.count(m.busyTimeMsPerSecond && m.busyTimeMsPerSecond.avg / 10)}% · back-pressured ${fmt.count(m.backPressuredTimeMsPerSecond && m.backPressuredTimeMsPerSecond.max / 10)}%`,
      `watermark ${fmt.watermark(m.currentInputWatermark && m.currentInputWatermark.min)}`,
    ];
    return [...node.operators.map((o) => `▸ ${o}`), ...out];
  };
  for (const node of state.plan) {
    const text = lines(node);
    const width = Math.min(420, Math.max(240, ...text.map((t) => t.length * 6.6 + 20)));
    g.setNode(String(node.id), { width, height: 26 + 16 * text.length, node, text });
  }
  for (const node of state.plan) {
    for (const input of node.inputs) {
      g.setEdge(String(input.id), String(node.id), { label: input.ship_strategy, width: 60, height: 14 });
    }
  }
  dagre.layout(g);
  const NS = 'http://www.w3.org/2000/svg';
  const s = (tag, attrs = {}, text) => {
    const el = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    return el;
  };
  const size = g.graph();
  const svg = s('svg', { width: size.width, height: size.height });
  for (const e of g.edges()) {
    const edge = g.edge(e);
    const d = edge.points.map((p, i) => `${i ? 'L' : 'M'}${p.x},${p.y}`).join(' ');
    svg.append(s('path', { d, class: 'edge', 'marker-end': 'url(#arrow)' }));
    if (edge.x !== undefined) svg.append(s('text', { x: edge.x - 25, y: edge.y, class: 'edge-label' }, edge.label));
  }
  const defs = s('defs');
  const marker = s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 6, markerHeight: 6, orient: 'auto' });
  marker.append(s('path', { d: 'M0,0 L10,5 L0,10 z', fill: '#98a2b3' }));
  defs.append(marker);
  svg.append(defs);
  for (const key of g.nodes()) {
    const n = g.node(key);
    const m = metrics[n.node.id] || {};
    const [fill, stroke] = colour(m.backPressuredTimeMsPerSecond ? m.backPressuredTimeMsPerSecond.max : 0);
    const group = s('g', {
      'data-test': 'vertex',
      'data-vertex': n.node.id,
      'data-rate-in': m.numRecordsInPerSecond ? m.numRecordsInPerSecond.sum : 0,
      'data-rate-out': m.numRecordsOutPerSecond ? m.numRecordsOutPerSecond.sum : 0,
      transform: `translate(${n.x - n.width / 2},${n.y - n.height / 2})`,
    });
    group.append(s('rect', { width: n.width, height: n.height, rx: 6, fill, stroke }));
    const title = `${n.node.id}: ${n.node.name}`;
    const fits = Math.floor((n.width - 20) / 7);
    group.append(s('text', { x: 10, y: 18, class: 'title' }, title.length > fits ? `${title.slice(0, fits - 1)}…` : title));
    n.text.forEach((t, i) => group.append(s('text', { x: 10, y: 36 + 16 * i }, t)));
    svg.append(group);
  }
  const subtasks = table(['vertex', 'subtask', 'state', 'worker', 'back-pressured'],
    j.vertices.flatMap((v) => v.subtasks.map((t) => h('tr', {},
      h('td', {}, v.name), h('td', { class: 'num' }, t.subtask + 1), h('td', {}, t.state),
      h('td', {}, t.worker), h('td', { class: 'num' }, `${t.back_pressured_time_ms_per_second} ms/s`)))));
  body.replaceChildren(
    h('div', { id: 'graph' }, svg),
    h('p', { class: 'legend' }, 'Rates are rows per second over the last heartbeats; colour: back-pressure (green < 10%, amber < 50%, red).'),
    h('h2', {}, 'Subtasks'), subtasks,
  );
}

async function checkpointsTab(id, j, body, state) {
  const c = await api(`/v1/jobs/${id}/checkpoints`);
  state.open = state.open || new Set();
  const rows = c.history.map((x) => {
    const details = h('details', { 'data-id': x.id, open: state.open.has(x.id) },
      h('summary', {}, `${Object.keys(x.operators).length} operators, ${x.subtasks.length} subtasks`),
      table(['operator', 'state size'], Object.entries(x.operators).map(([op, bytes]) =>
        h('tr', {}, h('td', {}, op), h('td', { class: 'num' }, fmt.bytes(bytes))))),
      table(['vertex', 'subtask', 'acknowledged after', 'alignment', 'state size', 'rows'], x.subtasks.map((t) =>
        h('tr', {}, h('td', {}, t.vertex), h('td', { class: 'num' }, t.subtask + 1),
          h('td', { class: 'num' }, fmt.ms(t.end_to_end_duration_ms)),
          h('td', { class: 'num' }, fmt.ms(t.alignment_duration_ms)),
          h('td', { class: 'num' }, fmt.bytes(t.state_size)), h('td', { class: 'num' }, fmt.count(t.state_rows))))));
    details.addEventListener('toggle', () => (details.open ? state.open.add(x.id) : state.open.delete(x.id)));
    return h('tr', { 'data-test': 'checkpoint-row', 'data-status': x.status },
      h('td', { class: 'num' }, x.id, x.is_savepoint ? ' (savepoint)' : ''),
      h('td', {}, x.status), h('td', {}, fmt.time(x.trigger_timestamp)),
      h('td', { class: 'num' }, fmt.ms(x.end_to_end_duration)),
      h('td', { class: 'num' }, fmt.bytes(x.state_size)), h('td', { class: 'num' }, fmt.bytes(x.checkpointed_size)),
      h('td', { class: 'num' }, x.num_acknowledged_subtasks),
      h('td', {}, x.failure_message ? h('span', { class: 'error' }, x.failure_message) : details));
  });
  const card = (value, label, test) => h('div', { class: 'card', 'data-test': test }, h('b', {}, value), h('span', {}, label));
  body.replaceChildren(
    h('div', { class: 'cards' },
      card(c.counts.completed, 'completed', 'checkpoints-completed'), card(c.counts.failed, 'failed'),
      card(c.counts.in_progress, 'in progress'),
      card(c.latest.restored ? fmt.time(c.latest.restored.restore_timestamp) : 'never', 'last restore')),
    h('h2', {}, 'History'),
    table(['id', 'status', 'triggered', 'duration', 'state size', 'written', 'acks', 'breakdown / failure'], rows),
  );
}

async function exceptionsTab(id, j, body) {
  const x = await api(`/v1/jobs/${id}/exceptions`);
  body.replaceChildren(
    h('h2', {}, 'Root cause'),
    x.rootException ? h('pre', { class: 'error' }, x.rootException) : h('p', {}, 'No failure.'),
    h('h2', {}, 'History'),
    table(['time', 'subtask', 'worker', 'attempt', 'exception'], x.exceptionHistory.entries.map((e) =>
      h('tr', { 'data-test': 'exception-row' }, h('td', {}, fmt.time(e.timestamp)), h('td', {}, e.task_name || '–'),
        h('td', {}, e.location || '–'), h('td', { class: 'num' }, e.attempt), h('td', { class: 'error' }, e.exception)))),
  );
}

async function configTab(id, j, body, state) {
  state.config = state.config || (await api(`/v1/jobs/${id}/config`));
  const rows = Object.entries(state.config['execution-config'] || {})
    .map(([k, v]) => h('tr', {}, h('td', {}, k), h('td', {}, typeof v === 'object' ? JSON.stringify(v) : String(v))));
  body.replaceChildren(table(['option', 'value'], rows));
}

// ---------------------------------------------------------------- routing

async function route() {
  clearInterval(refresh);
  const hash = location.hash || '#/';
  try {
    const m = hash.match(/^#\/jobs\/([^/]+)(?:\/(checkpoints|exceptions|config))?$/);
    if (m) await job(decodeURIComponent(m[1]), m[2] || '');
    else await overview();
  } catch (e) {
    show(failure(e));
  }
}

window.addEventListener('hashchange', route);
route();
