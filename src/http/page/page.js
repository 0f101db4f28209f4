// The status page: draws /api/status, kept fresh by the live view (/api/live, a WebSocket)
// and, while that is down, by polling. Every piece of data goes into the page as text
// (textContent), never as markup. The admin token and the commands token are kept in
// sessionStorage (this tab only), and each is sent only to its own endpoints.
'use strict';
(function () {
  var POLL_MS = 5000, FEED_MAX = 40, TOKEN_KEY = 'opex-admin-token', RECORD_SHOWN = 160;
  var CMD_TOKEN_KEY = 'opex-commands-token';
  var app = document.getElementById('app');
  var doc = null, ws = null, liveCount = 0, liveValues = 0, retryMs = 1000;

  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function clear(n) { while (n.firstChild) n.removeChild(n.firstChild); return n; }
  function add(parent) {
    for (var i = 1; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      parent.appendChild(typeof c === 'object' ? c : document.createTextNode(String(c)));
    }
    return parent;
  }
  function show(id, on) { $(id).hidden = !on; }
  function num(v) { return typeof v === 'number' ? v : 0; }
  function bytes(n) {
    if (typeof n !== 'number') return '?';
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + ' ' + u[i];
  }
  function dur(s) {
    if (typeof s !== 'number' || !isFinite(s)) return '?';
    s = Math.round(s);
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor(s % 3600 / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.floor(s % 86400 / 3600) + ' h';
  }
  function ago(ms) {
    if (typeof ms !== 'number' || !ms) return 'never';
    return dur(Math.max(0, (Date.now() - ms) / 1000)) + ' ago';
  }
  function when(t) {
    if (t === null || t === undefined || t === '') return '–';
    var d = typeof t === 'number' ? new Date(t > 1e11 ? t : t * 1000) : new Date(t);
    return isNaN(d.getTime()) ? String(t) : d.toLocaleString();
  }
  function show_value(v) {
    if (v === null || v === undefined) return '–';
    // A value as sent (scaled values come rounded to their scale); long float noise, as a
    // float register's, cut to 7 significant digits.
    if (typeof v === 'number') return Number.isInteger(v) || String(v).length <= 9 ? String(v) : String(Number(v.toPrecision(7)));
    if (typeof v === 'object') return JSON.stringify(v);
    return String(v);
  }
  function badge(text, level) { return el('span', 'badge ' + (level || ''), text); }
  function levelOf(state) {
    return ({ connected: 'ok', ok: 'ok', running: 'ok', done: 'ok', high: 'high', full: 'full',
      connecting: 'high', backoff: 'high', reconnecting: 'high', stopped: '' })[state] ||
      (/error|fail|disconnected|down|bad/.test(String(state)) ? 'bad' : '');
  }
  // The problems of one part (`device press-1`, `sink uns`), from the health model.
  function problemsOf(s, component) {
    return (Array.isArray(s.problems) ? s.problems : []).filter(function (p) { return p.component === component; });
  }
  // A part's last error with since when, and "recovered" once its trouble cleared.
  function lastError(text, entry, hint) {
    if (!text) return null;
    var box = el('div', 'last-error');
    if (entry.recovered_at) {
      box.classList.add('recovered');
      add(box, el('p', 'muted', 'last error: ' + text + ' · recovered ' + ago(Date.parse(entry.recovered_at)) +
        (entry.last_error_at ? ' (down from ' + when(entry.last_error_at) + ' to ' + when(entry.recovered_at) + ')' : '')));
      return box;
    }
    add(box, el('p', 'warn', 'error: ' + text + (entry.last_error_at ? ' · since ' + when(entry.last_error_at) : '')),
      hint ? el('p', 'muted hint', hint) : null);
    return box;
  }
  function table(head, rows, numeric) {
    var t = el('table'), tr = el('tr');
    head.forEach(function (h, i) { tr.appendChild(el('th', numeric && numeric[i] ? 'num' : '', h)); });
    add(t, tr);
    rows.forEach(function (r) {
      var row = el('tr');
      r.forEach(function (c, i) {
        var td = el('td', numeric && numeric[i] ? 'num' : '');
        add(td, c === null || c === undefined ? '–' : c);
        row.appendChild(td);
      });
      t.appendChild(row);
    });
    return t;
  }
  function card(title, right) {
    var c = el('div', 'card'), h = el('h3');
    add(h, el('span', '', title), right);
    return add(c, h);
  }
  function bar(pct, level) {
    var b = el('div', 'bar'), f = el('div', 'fill ' + (level || ''));
    f.style.width = Math.min(100, Math.max(0, num(pct))) + '%';
    return add(b, f);
  }

  // ---------------------------------------------------------------- sections

  function header(s) {
    var c = s.connector || {};
    $('name').textContent = c.name || 'opex-connector';
    document.title = (c.name || '') + ' · opex-connector';
    var parts = ['opex-connector ' + (c.version || '?'), 'up ' + dur(c.uptime_secs),
      'disk free ' + (typeof c.disk_free_bytes === 'number' ? bytes(c.disk_free_bytes) : '?')];
    if (c.previous_version) parts.push('previous ' + c.previous_version);
    var line = clear($('conn-line'));
    // The state of the one health model; `healthy` alone for a connector that has none.
    var state = s.state || (c.healthy ? 'ok' : 'failing');
    var n = Array.isArray(s.problems) ? s.problems.length : 0;
    var text = state + (n ? ' · ' + n + (n === 1 ? ' problem' : ' problems') : '');
    var b = badge(text, ({ ok: 'ok', degraded: 'high', failing: 'bad' })[state] || 'bad');
    b.id = 'state';
    b.dataset.state = state;
    add(line, b, ' ', parts.join(' · '));
    config(s.config);
  }

  // The running config: its revision, since when, the reloads since the start, and why the
  // last reload was refused, until the next one applies.
  function config(cfg) {
    show('config-line', !!cfg);
    show('config-error', !!(cfg && cfg.last_error));
    if (!cfg) return;
    var n = num(cfg.reloads);
    $('config-line').textContent = 'config revision ' + cfg.revision + ' since ' + when(cfg.loaded_at) +
      (n ? ' · ' + n + (n === 1 ? ' reload' : ' reloads') + ' since the start' : '');
    $('config-error').textContent = cfg.last_error ? 'last config change not applied: ' + cfg.last_error : '';
  }

  // What is not working now, first: the part, what is wrong, since when, what to do.
  function problems(s) {
    var list = Array.isArray(s.problems) ? s.problems : [];
    show('sec-problems', list.length > 0);
    var box = clear($('problems'));
    list.forEach(function (p) {
      var c = card(p.component, badge(p.kind.replace(/_/g, ' '), 'high'));
      c.classList.add('problem');
      c.dataset.component = p.component;
      add(c, el('p', '', p.message),
        el('p', 'muted', 'since ' + when(p.since) + ' (' + dur(p.for_secs) + ')'));
      if (p.hint) add(c, el('p', 'hint', p.hint));
      box.appendChild(c);
    });
  }

  function queuesOf(s) {
    if (Array.isArray(s.queues)) return s.queues;
    var q = s.push_queue;
    if (!q) return null;
    return [{ name: 'push_queue', kind: q.durable === false ? 'memory' : 'disk', on_full: q.on_full,
      quota: q.quota_bytes, quota_unit: 'bytes', used: q.used_bytes, fill_pct: q.fill_pct, level: q.level,
      blocked_total: q.blocked_total, evicted_total: q.evicted_total, dropped_total: q.dropped_total }];
  }

  // Writer channels and dead-letter tables are plumbing: drawn under Details, closed.
  function plumbing(q) { return q.kind === 'channel' || /dead_letters$/.test(q.name); }
  function queues(s) {
    var list = queuesOf(s), box = clear($('queues')), inner = clear($('plumbing'));
    var front = (list || []).filter(function (q) { return !plumbing(q); });
    var back = (list || []).filter(plumbing);
    show('sec-queues', front.length > 0);
    show('sec-details', back.length > 0);
    var storage = {};
    (Array.isArray(s.sinks) ? s.sinks : []).forEach(function (k) { if (k.type === 'storage') storage[k.name] = k; });
    (list || []).forEach(function (q) {
      var level = q.level || 'ok';
      var c = card(q.name + (q.kind ? ' (' + q.kind + ')' : ''), badge(level, level));
      c.dataset.queue = q.name;
      c.dataset.level = level;
      var quota = q.quota_unit === 'bytes' ? bytes(q.quota) : (q.quota !== undefined ? q.quota + ' ' + (q.quota_unit || '') : '?');
      var used = q.quota_unit === 'bytes' ? bytes(q.used) : (q.used !== undefined ? String(q.used) : '?');
      var into = plumbing(q) ? inner : box;
      if (storage[q.name]) {
        // Storage keeps a history: rows it holds are stored, not waiting.
        add(c, el('p', 'fill-text', 'stored ' + num(storage[q.name].queue_rows) + ' · ' + used + ' of ' + quota),
          el('p', 'muted', 'the oldest are evicted at the quota (on_full ' + (q.on_full || '?') + ') · evicted ' + num(q.evicted_total)));
        into.appendChild(c);
        return;
      }
      if (q.name === 'push_queue' && s.uplink && s.uplink.enabled === false) {
        add(c, el('p', 'note', 'no uplink configured: records stay on this box'));
      }
      add(c, bar(q.fill_pct, level),
        add(el('div', 'trend-row'), el('p', 'fill-text', num(q.fill_pct).toFixed(1) + ' % · ' + used + ' of ' + quota), spark('queue/' + q.name)),
        el('p', 'muted', 'on_full ' + (q.on_full || '?') + ' · blocked ' + num(q.blocked_total) +
          ' · evicted ' + num(q.evicted_total) + ' · dropped ' + num(q.dropped_total)));
      into.appendChild(c);
    });
  }

  function alerts(s) {
    show('sec-alerts', Array.isArray(s.alerts));
    if (!Array.isArray(s.alerts)) return;
    var box = clear($('alerts'));
    if (!s.alerts.length) { box.appendChild(el('p', 'muted', 'No open alerts.')); return; }
    s.alerts.forEach(function (a) {
      var c = card(a.queue || a.component || '?', badge(a.level, ({ warning: 'high', critical: 'bad' })[a.level] || a.level));
      c.classList.add('alert');
      if (a.level === 'full') c.classList.add('full');
      add(c, el('p', '', a.message),
        el('p', 'muted', (a.fill_pct !== undefined && a.fill_pct !== null ? num(a.fill_pct).toFixed(1) + ' % · ' : '') +
          'since ' + when(a.time) + (a.repeat ? ' · repeat ' + a.repeat : '')));
      if (a.hint) add(c, el('p', 'hint', a.hint));
      box.appendChild(c);
    });
  }

  // Values are {group: {point: {value, quality, unit}}}; a leaf is anything else.
  function valueRows(device, values) {
    var rows = [];
    Object.keys(values || {}).forEach(function (g) {
      var group = values[g];
      if (!group || typeof group !== 'object') { rows.push([g, group]); return; }
      Object.keys(group).forEach(function (p) {
        var v = group[p], shown, unit = '', x = v;
        if (v && typeof v === 'object' && 'value' in v) {
          shown = v.quality && v.quality !== 'good' ? 'bad' + (v.exception !== undefined ? ' (exception ' + v.exception + ')' : v.status ? ' (' + v.status + ')' : '') : show_value(v.value);
          unit = v.unit || '';
          x = v.quality && v.quality !== 'good' ? 0 : v.value;
        } else shown = show_value(v);
        // Numbers and booleans have a trend; strings do not.
        var name = 'point/' + device + '/' + g + '.' + p, line = typeof x === 'number' || typeof x === 'boolean' ? spark(name) : null;
        var bad = !!(v && typeof v === 'object' && v.quality && v.quality !== 'good');
        var cell = el('span', (line ? 'trendable' : '') + (bad ? ' bad-point' : ''), shown);
        cell.dataset.point = device + '/' + g + '.' + p;
        if (bad) cell.dataset.quality = 'bad';
        if (line) cell.onclick = function () { openChart(name); };
        rows.push([g + '.' + p, cell, unit, line || '']);
      });
    });
    return rows;
  }

  function devices(s) {
    var list = s.devices, box = clear($('devices'));
    show('sec-devices', Array.isArray(list) && list.length > 0);
    if (!Array.isArray(list)) return;
    list.forEach(function (d) {
      var c = card(d.name, badge(d.state, levelOf(d.state)));
      c.dataset.device = d.name;
      c.dataset.state = d.state;
      var errors = num(d.errors_total) + num(d.timeouts_total);
      add(c, el('p', 'muted', (d.protocol || '') + ' ' + (d.address || d.endpoint || '') + (d.template ? ' · template ' + d.template : '')),
        el('p', 'muted', 'last poll ' + ago(d.last_poll_ms) + (typeof d.poll_duration_ms === 'number' ? ' (' + d.poll_duration_ms.toFixed(1) + ' ms)' : '') +
          ' · polls ' + num(d.polls_total) + ' · errors ' + errors +
          (d.exceptions_total !== undefined ? ' · exceptions ' + num(d.exceptions_total) : '') +
          ' · lost ' + num(d.lost_total)),
        d.source ? add(el('p', 'muted trend-row'), 'records/s ', spark('in/' + d.source, true)) : null);
      add(c, lastError(d.last_error, d, d.last_error_hint));
      if (d.last_exception) add(c, el('p', 'warn', 'last refusal: ' + d.last_exception), d.last_exception_hint ? el('p', 'muted hint', d.last_exception_hint) : null);
      var rows = valueRows(d.name, d.values);
      var live = d.state === 'connected';
      if (rows.length && !live) add(c, el('p', 'muted stale-note', 'not connected: values as of the last poll, ' + ago(d.last_poll_ms)));
      if (rows.length) {
        var t = table(['point', 'value', 'unit', 'last hour'], rows);
        t.className = live ? 'values' : 'values stale';
        c.appendChild(t);
      }
      box.appendChild(c);
    });
  }

  function sinks(s) {
    show('sec-sinks', Array.isArray(s.sinks));
    if (!Array.isArray(s.sinks)) return;
    var u = s.uplink;
    var rows = s.sinks.map(function (k) {
      var found = problemsOf(s, 'sink ' + k.name), state = el('div', 'sink-state');
      state.dataset.sink = k.name;
      if (found.length) {
        state.dataset.state = 'problem';
        found.forEach(function (p) {
          add(state, badge(p.kind.replace(/_/g, ' '), 'bad'), ' ', el('span', '', p.message + ' · since ' + when(p.since)),
            p.hint ? el('p', 'muted hint', p.hint) : null);
        });
      } else {
        state.dataset.state = 'ok';
        add(state, badge(k.connected === false ? 'disconnected' : (k.connected ? 'connected' : 'ok'), k.connected === false ? 'bad' : 'ok'));
        if (k.recovered_at) add(state, ' ', el('span', 'muted recovered', 'trouble from ' + when(k.last_error_at) + ', recovered ' + ago(Date.parse(k.recovered_at)) + (k.last_error ? ': ' + k.last_error : '')));
      }
      var extra = [];
      if (k.type === 'push' && u && !u.enabled) extra.push('no uplink configured: records stay on this box');
      if (k.durable === false) extra.push('memory');
      if (k.note) extra.push(k.note);
      if (k.sparkplug) extra.push(sparkplug(k.sparkplug));
      if (extra.length) add(state, el('p', 'muted', extra.join(' · ')));
      var held = k.type === 'storage' ? 'stored ' + num(k.queue_rows) : (k.queue_rows !== undefined ? k.queue_rows : k.queue_depth);
      return [k.name, held, num(k.blocked), num(k.dropped), spark('out/' + k.name, true), state];
    });
    if (u && u.enabled) {
      var up = problemsOf(s, 'sink push').filter(function (p) { return p.kind === 'uplink_failing'; }).length ? 'failing' : (u.healthy ? 'healthy' : 'waiting');
      rows.push(['uplink', null, null, null, null, add(el('div'), badge(up, ({ healthy: 'ok', failing: 'bad' })[up] || ''),
        ' sent ' + num(u.sent_total) + ' · failures ' + num(u.failures_total) + (u.last_error ? ' · ' + u.last_error : ''))]);
    }
    add(clear($('sinks')), table(['sink', 'queue', 'blocked', 'dropped', 'out/s', 'state'], rows, [0, 1, 1, 1, 0, 0]));
  }

  // A Sparkplug node: its ids, whether it publishes (or waits for its primary host), its
  // session and message counts, and what waits to go out as historical.
  function sparkplug(p) {
    var h = p.primary_host, c = p.commands || {}, hist = p.historical || {};
    var parts = ['Sparkplug ' + p.group_id + '/' + p.edge_node_id,
      p.publishing ? 'publishing' : (h && h.state !== 'online' ? 'waiting for its primary host' : 'not publishing')];
    if (h) parts.push('host ' + h.id + ' ' + h.state);
    parts.push('bdSeq ' + num(p.bdSeq), 'seq ' + num(p.seq), 'births ' + num(p.births),
      'data ' + num(p.data_messages), 'commands ' + num(c.received),
      'historical ' + num(hist.waiting) + ' waiting, ' + num(hist.sent) + ' sent');
    return parts.join(' · ');
  }

  function sources(s) {
    var list = s.sources;
    show('sec-sources', Array.isArray(list) && list.length > 0);
    if (!Array.isArray(list)) return;
    var mqtt = list.some(function (x) { return x.kind === 'mqtt'; });
    $('mqtt-note').hidden = !mqtt;
    $('mqtt-note').textContent = mqtt ? 'MQTT is acked on receipt: records a full sink refuses are lost (counted). Use NATS JetStream when MQTT data must not be lost.' : '';
    var rows = list.map(function (x) {
      var lost = num(x.dropped) + (x.kind === 'mqtt' ? num(x.refused) + num(x.failed) : 0);
      return [x.name, x.kind || 'ingest', x.connected === undefined ? '' : (x.connected ? 'connected' : 'disconnected'),
        num(x.stored !== undefined ? x.stored : x.acked), num(x.refused), num(x.rejected) + num(x.unauthorized), lost, spark('in/' + x.name, true)];
    });
    add(clear($('sources')), table(['source', 'kind', 'state', 'stored', 'refused', 'rejected', 'lost', 'in/s'], rows, [0, 0, 0, 1, 1, 1, 1, 0]));
  }

  // The northbound OPC-UA server: whether it listens and where, its figures, certificates
  // waiting to be trusted, and the open sessions with their user and client application.
  function opcuaServer(s) {
    var o = s.opcua_server;
    show('sec-opcua', !!o);
    if (!o) return;
    var box = clear($('opcua'));
    var ends = (Array.isArray(o.endpoints) ? o.endpoints : []).map(function (e) {
      return e.url + ' ' + e.policy + (e.mode && e.mode !== 'None' ? ' ' + e.mode : '');
    });
    var state = badge(o.listening ? 'listening' : 'not listening', o.listening ? 'ok' : 'bad');
    state.dataset.opcuaListening = o.listening ? '1' : '0';
    add(box, add(el('p'), state, ' ', el('span', 'muted', ends.join(' · '))),
      el('p', 'muted', 'sessions ' + num(o.sessions) + ' · subscriptions ' + num(o.subscriptions) +
        ' · monitored items ' + num(o.monitored_items) + ' · reads ' + num(o.reads) +
        ' · writes ' + num(o.writes) + ' (' + num(o.writes_good) + ' written) · refused logins ' + num(o.refused_logins)));
    if (num(o.rejected_certificates) > 0) {
      add(box, el('p', 'warn', num(o.rejected_certificates) + ' client certificate(s) refused and waiting in rejected/: ' +
        'move a file to trusted/ to let that client in'));
    }
    var list = Array.isArray(o.open_sessions) ? o.open_sessions : [];
    if (list.length) {
      box.appendChild(table(['user', 'client application', 'security', 'since'], list.map(function (x) {
        var user = el('span', '', x.user);
        user.dataset.opcuaSession = x.application || x.application_uri || '';
        return [user, x.application || x.application_uri || '–', x.security, when(x.since)];
      })));
    } else if (num(o.sessions) > 0) {
      add(box, el('p', 'muted', 'no open session has read a device point yet'));
    }
  }

  function webhooks(s) {
    var list = s.engine && s.engine.webhooks;
    show('sec-webhooks', Array.isArray(list) && list.length > 0);
    if (!Array.isArray(list)) return;
    var rows = list.map(function (w) {
      return [w.name, num(w.received), num(w.accepted), num(w.backpressured),
        num(w.rejected_signature) + num(w.rejected_body), num(w.failed)];
    });
    add(clear($('webhooks')), table(['webhook', 'received', 'accepted', 'backpressured', 'rejected', 'failed'], rows, [0, 1, 1, 1, 1, 1]));
  }

  function schedules(s) {
    show('sec-schedules', Array.isArray(s.schedules) && s.schedules.length > 0);
    if (!Array.isArray(s.schedules)) return;
    var rows = s.schedules.map(function (x) {
      var r = x.last_result === undefined || x.last_result === null ? '–' : String(x.last_result);
      return [x.name, x.every || x.cron, when(x.next_tick), when(x.last_tick), badge(r, r === 'ok' ? 'ok' : (r === '–' ? '' : 'bad'))];
    });
    add(clear($('schedules')), table(['schedule', 'every / cron', 'next tick', 'last tick', 'last result'], rows));
  }

  function backfills(s) {
    show('sec-backfills', Array.isArray(s.backfills) && s.backfills.length > 0);
    if (!Array.isArray(s.backfills)) return;
    var box = clear($('backfills'));
    s.backfills.forEach(function (b) {
      var total = num(b.total), done = num(b.done), pct = total ? 100 * done / total : 0;
      var c = card(b.name, badge(b.state, levelOf(b.state)));
      add(c, el('p', 'muted', b.file), bar(pct, ''),
        el('p', '', done + ' of ' + (b.total === undefined || b.total === null ? '?' : total) + ' (' + pct.toFixed(1) + ' %)'),
        el('p', 'muted', (typeof b.rate_per_sec === 'number' ? b.rate_per_sec.toFixed(1) + ' records/s' : '') +
          (typeof b.eta_secs === 'number' ? ' · ETA ' + dur(b.eta_secs) : '')));
      box.appendChild(c);
    });
  }

  function deadLetters(s) {
    var d = s.dead_letters, u = s.uplink || {};
    show('sec-dlq', !!d);
    if (!d) return;
    var rows = [
      ['pipeline', num(d.open), num(d.resolved), num(d.parked_total), num(d.trimmed_total)],
      ['push (uplink rejected)', num(u.dead_letter_rows), null, num(u.dead_lettered_total), num(u.dead_trimmed_total)]
    ];
    queuedSinks(s).forEach(function (k) {
      if (k.name !== 'push') rows.push([k.name + ' (destination rejected)', num(k.dead_letter_rows), null, null, null]);
    });
    add(clear($('dlq')), table(['queue', 'open', 'resolved', 'parked', 'trimmed'], rows, [0, 1, 1, 1, 1]));
  }

  // The sinks with a queue of their own (push, queue: disk): they have dead letters.
  function queuedSinks(s) {
    var list = (s && Array.isArray(s.sinks)) ? s.sinks.filter(function (k) { return k.dead_letter_rows !== undefined; }) : [];
    return list.length ? list : [{ name: 'push' }];
  }

  function footer(s) {
    var l = s.live;
    $('footer').textContent = l ? 'live view: ' + num(l.clients) + ' of ' + num(l.max_clients) + ' clients · ' +
      num(l.published_total) + ' messages published · ' + num(l.skipped_total) + ' skipped by slow clients' : '';
  }

  function render() {
    if (!doc) return;
    [header, problems, alerts, devices, commands, sinks, queues, sources, opcuaServer, webhooks, schedules, backfills, deadLetters, footer]
      .forEach(function (f) { try { f(doc); } catch (e) { if (window.console) console.error(e); } });
    app.dataset.statusLoaded = '1';
  }

  // ---------------------------------------------------------------- data

  function poll() {
    if (ws && ws.readyState === 1) return;
    fetch('/api/status', { cache: 'no-store' }).then(function (r) { return r.json(); })
      .then(function (s) { doc = s; render(); })
      .catch(function () { $('live-state').textContent = 'connector unreachable'; });
  }

  function feed(m) {
    var list = $('feed'), li = el('li');
    var text = new Date(m.time_ms).toLocaleTimeString() + ' ' + m.source + ' ' + (m.key === undefined ? '' : m.key + ' ') + m.result + ' ' +
      (m.payload !== undefined ? JSON.stringify(m.payload) : '(' + m.payload_bytes + ' bytes)');
    li.textContent = text;
    li.title = text;
    list.insertBefore(li, list.firstChild);
    while (list.childNodes.length > FEED_MAX) list.removeChild(list.lastChild);
    show('sec-feed', true);
  }

  function onLive(m) {
    liveCount++;
    app.dataset.liveCount = String(liveCount);
    if (m.type === 'status' && m.status) {
      // A live status leaves some details out: keep the last full ones.
      doc = Object.assign({}, doc || {}, m.status);
      render();
    } else if (m.type === 'value') {
      liveValues++;
      app.dataset.liveValues = String(liveValues);
      feed(m);
      var d = doc && Array.isArray(doc.devices) && doc.devices.filter(function (x) { return x.source === m.source; })[0];
      if (d && m.payload && typeof m.payload === 'object') {
        d.values = d.values || {};
        d.values[m.key] = m.payload;
        d.last_poll_ms = m.time_ms;
        devices(doc);
      }
    }
  }

  function connect() {
    var url = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/api/live';
    try { ws = new WebSocket(url); } catch (e) { retry(); return; }
    ws.onopen = function () {
      retryMs = 1000;
      $('live-state').textContent = 'live';
      $('live-state').className = 'badge ok';
    };
    ws.onmessage = function (e) {
      var m;
      try { m = JSON.parse(e.data); } catch (x) { return; }
      onLive(m);
    };
    ws.onclose = function () {
      $('live-state').textContent = 'live view off, polling';
      $('live-state').className = 'badge';
      ws = null;
      retry();
    };
  }
  function retry() {
    setTimeout(connect, retryMs);
    retryMs = Math.min(retryMs * 2, 30000);
  }

  // ---------------------------------------------------------------- commands

  // The writable points of each device, with a write form per point once the commands token
  // is entered. Drawn again only when the points or the token change, so a live update never
  // wipes a value being typed; the counters are updated in place.
  var cmdShape = '', cmdCounts = {};

  function cmdToken() { try { return sessionStorage.getItem(CMD_TOKEN_KEY) || ''; } catch (e) { return ''; } }
  function cmdSay(text) { $('cmd-msg').textContent = text; }
  function counts(c) {
    c = c || {};
    return ['received', 'written', 'refused', 'expired', 'unavailable', 'failed', 'unknown', 'duplicates']
      .map(function (k) { return k + ' ' + num(c[k]); }).join(' · ');
  }
  function range(p) {
    var lo = p.min === null || p.min === undefined ? null : p.min, hi = p.max === null || p.max === undefined ? null : p.max;
    if (lo === null && hi === null) return 'its type';
    return (lo === null ? '' : lo) + ' … ' + (hi === null ? '' : hi);
  }

  // A point's type in words; an OPC-UA node's is learned from the server at its first read.
  function typeOf(p) {
    if (p.type === 'unknown until read') return 'not read yet (the server gives its type at the first read)';
    return p.type + ' (' + p.area + ')';
  }

  function commands(s) {
    var list = (Array.isArray(s.devices) ? s.devices : []).filter(function (d) { return Array.isArray(d.writable); });
    show('sec-commands', list.length > 0);
    var armed = !!cmdToken();
    var shape = JSON.stringify(list.map(function (d) { return [d.name, d.writable]; })) + (armed ? '+' : '-');
    if (shape !== cmdShape) {
      cmdShape = shape;
      drawCommands(list, armed);
    }
    list.forEach(function (d) { if (cmdCounts[d.name]) cmdCounts[d.name].textContent = counts(d.commands); });
  }

  function drawCommands(list, armed) {
    var box = clear($('commands'));
    cmdCounts = {};
    list.forEach(function (d) {
      var c = card(d.name, null);
      c.dataset.commands = d.name;
      var line = el('p', 'muted', counts(d.commands));
      cmdCounts[d.name] = line;
      c.appendChild(line);
      if (!d.writable.length) { c.appendChild(el('p', 'muted', 'No writable points.')); box.appendChild(c); return; }
      if (!armed) c.appendChild(el('p', 'muted', 'Enter the commands token to write.'));
      var rows = d.writable.map(function (p) {
        var where = d.name + '/' + p.name, result = el('span');
        result.dataset.result = where;
        if (!armed) return [p.name, typeOf(p), range(p), null, null];
        var input;
        if (p.type === 'bool' || p.type === 'Boolean') {
          input = el('select', 'value');
          [['true', 'on (true)'], ['false', 'off (false)']].forEach(function (o) {
            var opt = el('option', '', o[1]);
            opt.value = o[0];
            input.appendChild(opt);
          });
        } else {
          input = el('input', 'value');
          input.type = 'text';
          input.autocomplete = 'off';
          if (p.type !== 'string' && p.type !== 'String') input.inputMode = 'decimal';
        }
        input.dataset.value = where;
        var write = button('Write', '', function () { ask(d.name, p, input, result); });
        write.dataset.write = where;
        return [p.name, typeOf(p), range(p), input, add(el('span'), write, ' ', result)];
      });
      c.appendChild(table(['point', 'type', 'range', 'value', 'write'], rows));
      box.appendChild(c);
    });
  }

  // The value typed for point p, or an Error saying why it is none.
  function typed(p, input) {
    var v = String(input.value).trim();
    if (p.type === 'bool' || p.type === 'Boolean') return v === 'true';
    if (p.type === 'string' || p.type === 'String') return v;
    if (v === '' || !isFinite(Number(v))) return new Error('not a number: ' + JSON.stringify(v));
    return Number(v);
  }

  // The first click asks: "Write 72.5 to oven/setpoint?" with Confirm and Cancel.
  function ask(device, p, input, result) {
    var value = typed(p, input), where = device + '/' + p.name;
    clear(result);
    result.className = '';
    if (value instanceof Error) { result.textContent = value.message; result.className = 'failed'; return; }
    var yes = button('Confirm', 'danger', function () { send(device, p.name, value, result); });
    yes.dataset.confirm = where;
    var no = button('Cancel', '', function () { clear(result); cmdSay('write to ' + where + ' cancelled'); });
    no.dataset.cancel = where;
    add(result, el('span', 'confirm', 'Write ' + JSON.stringify(value) + ' to ' + where + '?'), ' ', yes, ' ', no);
  }

  function commandId() {
    var r = new Uint32Array(2);
    try { crypto.getRandomValues(r); } catch (e) { r[0] = Math.floor(Math.random() * 4294967295); }
    return 'page-' + Date.now().toString(36) + '-' + r[0].toString(36) + r[1].toString(36);
  }

  function send(device, point, value, result) {
    var t = cmdToken(), where = device + '/' + point, points = {};
    clear(result);
    if (!t) { result.textContent = 'enter the commands token first'; return; }
    points[point] = value;
    result.textContent = 'writing…';
    fetch('/api/devices/' + encodeURIComponent(device) + '/write', {
      method: 'POST', cache: 'no-store',
      headers: { Authorization: 'Bearer ' + t, 'Content-Type': 'application/json' },
      body: JSON.stringify({ id: commandId(), points: points })
    }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (body) {
        if (r.status === 401) throw new Error('the commands token is wrong');
        if (!r.ok) throw new Error(body.error || ('HTTP ' + r.status));
        return body;
      });
    }).then(function (body) {
      var res = (body.points || {})[point] || {};
      var text = res.result || '?';
      if (res.reason) text += ': ' + res.reason;
      if (res.exception !== undefined) text += ' ' + res.exception;
      result.textContent = text;
      result.className = res.result === 'written' ? 'written' : 'failed';
      result.dataset.outcome = res.result || '';
      cmdSay(where + ' ← ' + JSON.stringify(value) + ': ' + text + (typeof body.latency_ms === 'number' ? ' (' + body.latency_ms.toFixed(1) + ' ms)' : '') + ', command ' + body.id);
    }).catch(function (e) {
      result.textContent = e.message;
      result.className = 'failed';
      result.dataset.outcome = 'error';
      cmdSay(where + ': ' + e.message);
    });
  }

  $('cmd-token-form').onsubmit = function (e) {
    e.preventDefault();
    try { sessionStorage.setItem(CMD_TOKEN_KEY, $('cmd-token').value.trim()); } catch (x) { /* private mode */ }
    $('cmd-token').value = '';
    cmdSay(cmdToken() ? 'commands token kept for this tab' : 'no token');
    if (doc) commands(doc);
  };
  $('cmd-token-forget').onclick = function () {
    try { sessionStorage.removeItem(CMD_TOKEN_KEY); } catch (x) { /* private mode */ }
    cmdSay('commands token forgotten');
    if (doc) commands(doc);
  };

  // ---------------------------------------------------------------- trends

  // The last hour of each point, queue and rate (/api/trends): fetched whole once, then every
  // 10 s only what is new, drawn as inline SVG. Times are the connector's, not the browser's.
  var BUCKET = 10000, HOUR = 3600000, BATCH = 32;
  var SVG = $('chart-svg').namespaceURI;
  var trends = {}, wanted = {}, asked = {}, trendEnd = 0, chartName = null, soonTimer = null, busy = false;

  function svg(tag, attrs, parent) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmt(v) { return typeof v === 'number' && isFinite(v) ? String(Number(v.toPrecision(4))) : '–'; }
  // Round steps (1, 2 or 5 times a power of ten) between lo and hi, about four of them.
  function ticks(lo, hi) {
    var raw = (hi - lo) / 4, mag = Math.pow(10, Math.floor(Math.log(raw) / Math.LN10)), f = raw / mag, out = [];
    var step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
    for (var v = Math.ceil(lo / step) * step; v <= hi; v += step) out.push(v);
    return out;
  }
  function hhmm(t) { var d = new Date(t), p = function (n) { return (n < 10 ? '0' : '') + n; }; return p(d.getHours()) + ':' + p(d.getMinutes()); }

  // A sparkline button for series `name` (with its newest value when `withValue`).
  function spark(name, withValue) {
    var b = el('button', 'spark');
    b.type = 'button';
    b.dataset.spark = name;
    b.title = name + ': the last hour (click for the chart)';
    if (withValue) b.dataset.value = '1';
    b.onclick = function () { openChart(name); };
    svg('svg', { viewBox: '0 0 80 18', preserveAspectRatio: 'none' }, b);
    drawSpark(b);
    if (!asked[name]) soon();
    wanted[name] = true;
    return b;
  }

  // [[x, value]...] runs of `col` with no missing bucket inside, x in 0..1 over the hour.
  function runs(s, col) {
    var out = [], run = null, prev = 0, from = trendEnd - HOUR;
    s.b.forEach(function (k) {
      if (k.t < from || typeof k[col] !== 'number') return;
      if (!run || k.t - prev > BUCKET) out.push(run = []);
      run.push([(k.t + BUCKET / 2 - from) / HOUR, k[col]]);
      prev = k.t;
    });
    return out;
  }
  // The value axis: a fill (%) is drawn 0 to 100, anything else over what it did in the hour.
  function span(s, lo, hi) {
    if (s.unit === '%') return [0, 100];
    var min = Infinity, max = -Infinity;
    s.b.forEach(function (k) {
      if (k.t < trendEnd - HOUR) return;
      if (typeof k[lo] === 'number') min = Math.min(min, k[lo]);
      if (typeof k[hi] === 'number') max = Math.max(max, k[hi]);
    });
    if (min > max) return null;
    var pad = (max - min) * 0.08 || Math.abs(max) * 0.05 || 1;
    return [min - pad, max + pad];
  }
  function pathOf(points, x, y) {
    return points.map(function (p, i) { return (i ? 'L' : 'M') + x(p[0]).toFixed(1) + ' ' + y(p[1]).toFixed(1); }).join(' ');
  }

  function drawSpark(b) {
    var s = trends[b.dataset.spark], g = b.firstChild, r = s && span(s, 'mean', 'mean');
    while (g.firstChild) g.removeChild(g.firstChild);
    var n = 0;
    if (r) {
      var x = function (v) { return v * 80; }, y = function (v) { return 17 - 16 * (v - r[0]) / (r[1] - r[0]); };
      runs(s, 'mean').forEach(function (run) {
        n += run.length;
        // One bucket alone is drawn as a short dash, so it shows.
        if (run.length === 1) run = [[run[0][0] - 0.03, run[0][1]], [run[0][0], run[0][1]]];
        svg('path', { d: pathOf(run, x, y), class: 'line' }, g);
      });
    }
    b.dataset.points = String(n);
    if (b.dataset.value) {
      var v = b.lastChild.nodeType === 3 ? b.lastChild : b.appendChild(document.createTextNode(''));
      var k = s && s.b[s.b.length - 1];
      v.textContent = ' ' + (k ? fmt(k.mean) : '–');
    }
  }

  function merge(a) {
    var times = a.times_ms || [];
    if (times.length) trendEnd = Math.max(trendEnd, times[times.length - 1] + BUCKET);
    (a.series || []).forEach(function (x) {
      var old = trends[x.name], b = old ? old.b.filter(function (k) { return k.t < a.start_ms; }) : [];
      times.forEach(function (t, i) {
        if (x.mean[i] !== null) b.push({ t: t, min: x.min[i], max: x.max[i], mean: x.mean[i], last: x.last[i] });
      });
      trends[x.name] = { unit: x.unit, b: b.filter(function (k) { return k.t >= trendEnd - HOUR; }) };
    });
  }

  function soon() { if (!soonTimer && !busy) soonTimer = setTimeout(refreshTrends, 300); }
  function askTrends(part, since) {
    return fetch('/api/trends?series=' + part.map(encodeURIComponent).join(',') + (since ? '&since=' + since : ''), { cache: 'no-store' })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (a) { if (a) { merge(a); part.forEach(function (n) { asked[n] = true; }); } });
  }
  // One round at a time; a name counts as asked once an answer named it (kept or unknown).
  function refreshTrends() {
    soonTimer = null;
    if (busy) return;
    var names = Object.keys(wanted), calls = [];
    [names.filter(function (n) { return !asked[n]; }), names.filter(function (n) { return asked[n]; })].forEach(function (list, known) {
      for (var i = 0; i < list.length; i += BATCH) calls.push(askTrends(list.slice(i, i + BATCH), known && trendEnd ? trendEnd - BUCKET : 0));
    });
    busy = true;
    Promise.all(calls).catch(function () { /* asked again at the next round */ }).then(function () {
      busy = false;
      Array.prototype.forEach.call(document.querySelectorAll('[data-spark]'), drawSpark);
      if (chartName) drawChart();
      app.dataset.trendsLoaded = '1';
    });
  }

  function openChart(name) {
    chartName = name;
    $('chart').hidden = false;
    $('chart').dataset.series = name;
    drawChart();
    $('chart-close').focus();
  }
  function closeChart() { chartName = null; $('chart').hidden = true; }

  // The hour of `chartName`: min/max band, mean line, newest value, value and time axes.
  function drawChart() {
    var s = trends[chartName], box = clear($('chart-svg')), W = 720, H = 260, L = 56, R = 12, T = 10, B = 24;
    $('chart-title').textContent = chartName + (s && s.unit ? ' (' + s.unit + ')' : '');
    var k = s && s.b[s.b.length - 1], r = k && span(s, 'min', 'max');
    $('chart-note').textContent = !r ? 'No samples in the last hour yet.' :
      'now ' + fmt(k.last) + ' · mean line, min/max band, one point per 10 s · ' + s.b.length + ' of 360 buckets';
    box.dataset.buckets = String(s ? s.b.length : 0);
    if (!r) return;
    var x = function (v) { return L + v * (W - L - R); }, y = function (v) { return T + (H - T - B) * (1 - (v - r[0]) / (r[1] - r[0])); };
    ticks(r[0], r[1]).forEach(function (v) {
      var yy = y(v).toFixed(1);
      svg('line', { x1: L, x2: W - R, y1: yy, y2: yy, class: 'grid' }, box);
      svg('text', { x: L - 6, y: yy, class: 'tick-y', 'text-anchor': 'end', 'dominant-baseline': 'middle' }, box).textContent = fmt(v);
    });
    var from = trendEnd - HOUR;
    // A tick every 10 min, none so close to an end that its label would be cut.
    for (var t = Math.ceil((from + 180000) / 600000) * 600000; t < trendEnd - 180000; t += 600000) {
      var xx = x((t - from) / HOUR).toFixed(1);
      svg('line', { x1: xx, x2: xx, y1: T, y2: H - B, class: 'grid' }, box);
      svg('text', { x: xx, y: H - 6, class: 'tick-x', 'text-anchor': 'middle' }, box).textContent = hhmm(t);
    }
    var lows = runs(s, 'min'), highs = runs(s, 'max');
    highs.forEach(function (hi, j) {
      var band = hi.concat((lows[j] || []).slice().reverse());
      svg('path', { d: pathOf(band, x, y) + ' Z', class: 'band' }, box);
    });
    runs(s, 'mean').forEach(function (run) { svg('path', { d: pathOf(run, x, y), class: 'mean' }, box); });
    svg('circle', { cx: x((k.t + BUCKET / 2 - from) / HOUR).toFixed(1), cy: y(k.last).toFixed(1), r: 3, class: 'now' }, box);
    svg('rect', { x: L, y: T, width: W - L - R, height: H - T - B, class: 'frame' }, box);
  }

  $('chart-close').onclick = closeChart;
  $('chart').onclick = function (e) { if (e.target === $('chart')) closeChart(); };
  document.addEventListener('keydown', function (e) { if (e.key === 'Escape' && chartName) closeChart(); });

  // ---------------------------------------------------------------- admin

  function token() { try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; } }
  function admin(method, path) {
    var t = token();
    if (!t) return Promise.reject(new Error('enter the admin token first'));
    return fetch(path, { method: method, headers: { Authorization: 'Bearer ' + t }, cache: 'no-store' })
      .then(function (r) {
        return r.json().catch(function () { return {}; }).then(function (body) {
          if (r.status === 401) throw new Error('the admin token is wrong');
          if (r.status === 404 && body.error === 'no such endpoint') throw new Error('the admin endpoints are off: connector.http.admin_token is not set');
          if (!r.ok && r.status !== 503) throw new Error(body.error || ('HTTP ' + r.status));
          return body;
        });
      });
  }
  function say(text) { $('dlq-msg').textContent = text; }
  function pre(v) { return el('pre', '', JSON.stringify(v, null, 1)); }

  function listOpen() {
    admin('GET', '/api/dead-letters?state=open&limit=100').then(function (body) {
      var rows = (body.rows || []).map(function (r) {
        var b = el('button', '', 'Replay');
        b.type = 'button';
        b.onclick = function () { replay(r.id); };
        return [r.id, r.flow + ' / ' + r.node, r.reason, when(r.at_ms), pre(r.record), b];
      });
      say(rows.length + ' open dead letters (oldest first, at most 100).');
      add(clear($('dlq-list')), table(['id', 'flow / node', 'reason', 'at', 'record', 'actions'], rows));
    }).catch(function (e) { say(e.message); });
  }
  function replay(id) {
    admin('POST', '/api/dead-letters/' + encodeURIComponent(id) + '/replay').then(function (body) {
      say('dead letter ' + id + ': ' + (body.result || body.error || 'done'));
      listOpen();
    }).catch(function (e) { say(e.message); });
  }
  // ------------------------------------------------ queue dead letters

  function queuePath(sink, rest) {
    return '/api/sinks/' + encodeURIComponent(sink) + '/dead-letters' + (rest || '');
  }
  function shortRecord(r) {
    var text = JSON.stringify(r === undefined ? null : r);
    var e = el('span', 'rec', text.length > RECORD_SHOWN ? text.slice(0, RECORD_SHOWN) + '…' : text);
    e.title = text;
    return e;
  }
  function button(label, cls, action) {
    var b = el('button', cls, label);
    b.type = 'button';
    b.onclick = action;
    return b;
  }

  // Every queue's dead letters (the oldest 100 of each), with Replay, Delete and Replay all.
  function listQueues(note) {
    var sinks = queuedSinks(doc).map(function (k) { return k.name; });
    Promise.all(sinks.map(function (name) {
      return admin('GET', queuePath(name, '?limit=100')).then(function (body) { return { name: name, body: body }; });
    })).then(function (lists) {
      var box = el('div', 'qdl'), shown = 0, total = 0;
      lists.forEach(function (l) {
        var rows = l.body.rows || [];
        shown += rows.length;
        total += num(l.body.total);
        var h = el('h3');
        var n = num(l.body.total);
        add(h, el('span', '', l.name + ': ' + n + (n === 1 ? ' dead letter' : ' dead letters')));
        if (rows.length) h.appendChild(button('Replay all', '', function () { replayAll(l.name); }));
        box.appendChild(h);
        if (!rows.length) return;
        box.appendChild(table(['id', 'seq', 'reason', 'at', 'record', 'actions'], rows.map(function (r) {
          var actions = el('span');
          actions.dataset.deadLetter = l.name + '/' + r.id;
          var del = button('Delete', 'danger', function () {
            // A second click confirms: the record is given up for good.
            if (del.dataset.armed) { remove(l.name, r.id); return; }
            del.dataset.armed = '1';
            del.textContent = 'Confirm delete';
          });
          add(actions, button('Replay', '', function () { replayQueued(l.name, r.id); }), ' ', del);
          return [r.id, r.seq, r.reason, when(r.at), shortRecord(r.record), actions];
        }), [1, 1, 0, 0, 0, 0]));
      });
      say((note ? note + ' · ' : '') + shown + ' of ' + total + ' queue dead letters (records a destination refused for good; Replay puts one back at the head of its queue, Delete gives up on it).');
      add(clear($('dlq-list')), box);
    }).catch(function (e) { say(e.message); });
  }
  function replayQueued(sink, id) {
    admin('POST', queuePath(sink, '/' + encodeURIComponent(id) + '/replay')).then(function (body) {
      listQueues(body.ok ? sink + ' dead letter ' + id + ' replayed (seq ' + body.seq + ')' : sink + ' dead letter ' + id + ': ' + (body.error || 'not replayed'));
    }).catch(function (e) { say(e.message); });
  }
  function replayAll(sink) {
    admin('POST', queuePath(sink, '/replay')).then(function (body) {
      var failed = Array.isArray(body.failed) ? body.failed.length : 0;
      listQueues(body.ok ? sink + ': ' + num(body.replayed) + ' replayed, ' + failed + ' failed, ' + num(body.left) + ' left' +
        (body.stopped ? ' (' + body.stopped + ')' : '') : sink + ': ' + (body.error || 'not replayed'));
    }).catch(function (e) { say(e.message); });
  }
  function remove(sink, id) {
    admin('DELETE', queuePath(sink, '/' + encodeURIComponent(id))).then(function () {
      listQueues(sink + ' dead letter ' + id + ' deleted');
    }).catch(function (e) { say(e.message); });
  }

  $('token-form').onsubmit = function (e) {
    e.preventDefault();
    try { sessionStorage.setItem(TOKEN_KEY, $('token').value.trim()); } catch (x) { /* private mode */ }
    $('token').value = '';
    say(token() ? 'admin token kept for this tab' : 'no token');
  };
  $('token-forget').onclick = function () {
    try { sessionStorage.removeItem(TOKEN_KEY); } catch (x) { /* private mode */ }
    clear($('dlq-list'));
    say('admin token forgotten');
  };
  $('dlq-open').onclick = listOpen;
  $('queue-dlq-open').onclick = function () { listQueues(''); };

  poll();
  setInterval(poll, POLL_MS);
  setInterval(refreshTrends, BUCKET);
  if (window.WebSocket) connect(); else $('live-state').textContent = 'polling';
})();
