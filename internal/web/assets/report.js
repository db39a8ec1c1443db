// heaplens report: flame graph (canvas), top table, timeline. No
// dependencies; the data is the JSON document of docs/json-format.md,
// embedded in the page or fetched from the server of `heaplens serve`.
(function () {
  'use strict';
  var T0 = performance.now();
  var ROW = 17;
  var MODE = (typeof HEAPLENS_MODE === 'object' && HEAPLENS_MODE) || {};
  var VIEWS = ['peak', 'leaks', 'live', 'allocs', 'temporary', 'timeline', 'resident'];
  var $ = function (id) { return document.getElementById(id); };
  var doc = null, tree = null, zoom = 0, zoomPath = [], searchRe = null, matchFrame = null;
  var topRows = [], topKey = 'self', renders = 0;

  // " ± X": a 95 % interval, except at rate 1 where values are exact.
  function pm(ci) { return doc.rate > 1 ? ' ± ' + human(ci) : ''; }
  function human(b) {
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0, v = Math.abs(b);
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (b < 0 ? '-' : '') + (i === 0 ? v.toFixed(0) : v.toFixed(1)) + ' ' + u[i];
  }
  function secs(t) { return t.toFixed(t < 10 ? 3 : 2) + ' s'; }
  function hash(s) { var h = 0; for (var i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return h >>> 0; }

  // ---- tree -------------------------------------------------------------
  // Nodes live in typed arrays; node 0 is the root. Children are stored
  // contiguously (kidStart/kidCount into kids), sorted by value descending.
  function buildTree(d) {
    var labels = d.frames.map(function (f) { return f.label; });
    var kinds = d.frames.map(function (f) { return f.kind; });
    var procFrame = {};
    d.processes.forEach(function (p) { procFrame[p.stream] = labels.length; labels.push(p.label); kinds.push('process'); });
    var cap = 1 << 12, n = 1;
    var parent = new Int32Array(cap), frame = new Int32Array(cap), value = new Float64Array(cap), depth = new Int32Array(cap);
    parent[0] = -1; frame[0] = -1;
    var K = labels.length + 2, map = new Map(), maxDepth = 0;
    function grow() {
      cap *= 2;
      var p2 = new Int32Array(cap); p2.set(parent); parent = p2;
      var f2 = new Int32Array(cap); f2.set(frame); frame = f2;
      var v2 = new Float64Array(cap); v2.set(value); value = v2;
      var d2 = new Int32Array(cap); d2.set(depth); depth = d2;
    }
    function child(par, f) {
      var key = par * K + f, c = map.get(key);
      if (c === undefined) {
        if (n === cap) grow();
        c = n++; parent[c] = par; frame[c] = f; value[c] = 0; depth[c] = depth[par] + 1;
        if (depth[c] > maxDepth) maxDepth = depth[c];
        map.set(key, c);
      }
      return c;
    }
    var S = d.samples;
    for (var i = 0; i < S.stack.length; i++) {
      var b = S.bytes[i];
      if (b <= 0) continue;
      value[0] += b;
      var pf = procFrame[S.stream[i]];
      if (pf === undefined) { pf = labels.length; procFrame[S.stream[i]] = pf; labels.push('[stream ' + S.stream[i] + ']'); kinds.push('process'); }
      var node = child(0, pf); value[node] += b;
      var st = d.stacks[S.stack[i]];
      for (var j = st.length - 1; j >= 0; j--) { node = child(node, st[j]); value[node] += b; }
    }
    map = null;
    var kidCount = new Int32Array(n), kidStart = new Int32Array(n), kids = new Int32Array(Math.max(n - 1, 1));
    for (var c = 1; c < n; c++) kidCount[parent[c]]++;
    var o = 0;
    for (var q = 0; q < n; q++) { kidStart[q] = o; o += kidCount[q]; }
    var fill = new Int32Array(n);
    for (var c3 = 1; c3 < n; c3++) { var p = parent[c3]; kids[kidStart[p] + fill[p]++] = c3; }
    for (var q2 = 0; q2 < n; q2++) {
      if (kidCount[q2] > 1) kids.subarray(kidStart[q2], kidStart[q2] + kidCount[q2]).sort(function (a, b) { return value[b] - value[a]; });
    }
    return { n: n, parent: parent, frame: frame, value: value, depth: depth, kids: kids, kidStart: kidStart,
      kidCount: kidCount, labels: labels, kinds: kinds, maxDepth: maxDepth };
  }

  function label(n) { return n === 0 ? 'all' : tree.labels[tree.frame[n]]; }
  function kind(n) { return n === 0 ? 'root' : tree.kinds[tree.frame[n]]; }

  // ---- flame graph ------------------------------------------------------
  function color(n) {
    var f = tree.frame[n];
    if (matchFrame && f >= 0 && matchFrame[f]) return '#e040e0';
    var k = kind(n), h = hash(label(n));
    if (k === 'python') return 'hsl(' + (195 + h % 30) + ',60%,' + (58 + h % 14) + '%)';
    if (k === 'native') return 'hsl(' + (10 + h % 35) + ',78%,' + (56 + h % 14) + '%)';
    if (k === 'pool') return '#9b7ede';
    if (k === 'process') return '#c9c9c9';
    if (k === 'root') return '#dedede';
    return '#bbbbbb';
  }

  function ancestors(n) { var a = []; while (n > 0) { n = tree.parent[n]; a.unshift(n); } return a; }

  function drawFlame() {
    var c = $('flame'), W = c.parentNode.clientWidth || 1000, dpr = window.devicePixelRatio || 1;
    var H = (tree.maxDepth + 1) * ROW + 1;
    c.style.height = H + 'px'; c.width = W * dpr; c.height = H * dpr;
    var ctx = c.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    ctx.font = '11px ui-monospace, monospace'; ctx.textBaseline = 'middle';
    var charW = ctx.measureText('m').width || 6.6;
    function rect(n, x, w, d, dim) {
      var y = d * ROW;
      ctx.fillStyle = color(n);
      ctx.globalAlpha = dim ? 0.55 : 1;
      ctx.fillRect(x, y, Math.max(w - 0.5, 0.5), ROW - 1);
      ctx.globalAlpha = 1;
      if (w > 3 * charW) {
        var s = label(n), max = Math.floor((w - 6) / charW);
        if (s.length > max) s = s.slice(0, Math.max(max - 1, 1)) + '\u2026';
        ctx.fillStyle = '#111'; ctx.fillText(s, x + 3, y + ROW / 2);
      }
    }
    var chain = ancestors(zoom);
    chain.forEach(function (a) { rect(a, 0, W, tree.depth[a], true); });
    var scale = tree.value[zoom] > 0 ? W / tree.value[zoom] : 0;
    var V = tree.value, ks = tree.kidStart, kc = tree.kidCount, kids = tree.kids, dep = tree.depth;
    (function draw(n, x) {
      var w = V[n] * scale;
      if (w < 0.35) return;
      rect(n, x, w, dep[n], false);
      for (var i = ks[n], e = ks[n] + kc[n]; i < e; i++) { var k = kids[i]; draw(k, x); x += V[k] * scale; }
    })(zoom, 0);
    $('crumbs').textContent = zoom === 0 ? 'click a frame to zoom in' : 'zoomed into: ' + label(zoom) + ' (' + human(tree.value[zoom]) + ')';
    c.dataset.zoom = zoom === 0 ? '' : label(zoom);
  }

  // nodeAt returns the node drawn at canvas coordinates (x, y), or -1.
  function nodeAt(x, y) {
    var W = $('flame').clientWidth, d = Math.floor(y / ROW);
    var chain = ancestors(zoom);
    if (d < chain.length) return chain[d];
    var n = zoom, x0 = 0, scale = tree.value[zoom] > 0 ? W / tree.value[zoom] : 0;
    if (d === tree.depth[zoom]) return x < W ? zoom : -1;
    while (tree.depth[n] < d) {
      var found = -1;
      for (var i = tree.kidStart[n], e = i + tree.kidCount[n]; i < e; i++) {
        var k = tree.kids[i], w = tree.value[k] * scale;
        if (x >= x0 && x < x0 + w) { found = k; break; }
        x0 += w;
      }
      if (found < 0) return -1;
      n = found;
    }
    return n;
  }

  function setZoom(n) {
    zoom = n;
    zoomPath = [];
    for (var a = n; a > 0; a = tree.parent[a]) zoomPath.unshift(label(a));
    drawFlame();
  }

  // restoreZoom finds the zoomed node again in a rebuilt tree by its path.
  function restoreZoom() {
    var n = 0;
    for (var i = 0; i < zoomPath.length; i++) {
      var next = -1;
      for (var j = tree.kidStart[n], e = j + tree.kidCount[n]; j < e; j++) if (label(tree.kids[j]) === zoomPath[i]) { next = tree.kids[j]; break; }
      if (next < 0) { zoomPath = []; return 0; }
      n = next;
    }
    return n;
  }

  // ---- search -----------------------------------------------------------
  function applySearch() {
    var q = $('search').value, info = $('match-info');
    searchRe = null; matchFrame = null;
    if (q) {
      try { searchRe = new RegExp(q, 'i'); } catch (e) { info.textContent = 'bad regexp: ' + e.message; drawFlame(); return; }
      matchFrame = new Uint8Array(tree.labels.length);
      for (var i = 0; i < tree.labels.length; i++) if (searchRe.test(tree.labels[i])) matchFrame[i] = 1;
      var S = doc.samples, matched = 0;
      for (var s = 0; s < S.stack.length; s++) {
        var st = doc.stacks[S.stack[s]];
        for (var j = 0; j < st.length; j++) if (matchFrame[st[j]]) { matched += Math.max(S.bytes[s], 0); break; }
      }
      var tot = doc.total.bytes || 1;
      info.textContent = 'matched ' + human(matched) + ' (' + (100 * matched / tot).toFixed(1) + '%)';
      info.dataset.matched = String(matched);
    } else {
      info.textContent = ''; delete info.dataset.matched;
    }
    drawFlame();
  }

  // ---- top table --------------------------------------------------------
  function buildTop() {
    var nf = doc.frames.length, self = new Float64Array(nf), total = new Float64Array(nf), seen = new Int32Array(nf).fill(-1);
    // Variances add over rows (different allocations are sampled independently).
    var selfVar = new Float64Array(nf), totalVar = new Float64Array(nf);
    var S = doc.samples;
    for (var s = 0; s < S.stack.length; s++) {
      var b = S.bytes[s], st = doc.stacks[S.stack[s]], v = Math.pow((S.bytes_ci95 ? S.bytes_ci95[s] : 0) / 1.96, 2);
      if (b <= 0 || st.length === 0) continue;
      self[st[0]] += b; selfVar[st[0]] += v;
      for (var j = 0; j < st.length; j++) { var f = st[j]; if (seen[f] !== s) { seen[f] = s; total[f] += b; totalVar[f] += v; } }
    }
    topRows = [];
    for (var i = 0; i < nf; i++) if (total[i] > 0) topRows.push({ name: doc.frames[i].label, kind: doc.frames[i].kind, self: self[i], total: total[i],
      selfCI: 1.96 * Math.sqrt(selfVar[i]), totalCI: 1.96 * Math.sqrt(totalVar[i]) });
    sortTop(topKey);
  }

  function sortTop(key) {
    topKey = key;
    var num = key === 'self' || key === 'total';
    topRows.sort(function (a, b) {
      if (num) return b[key] - a[key] || (a.name < b.name ? -1 : 1);
      return a[key] < b[key] ? -1 : a[key] > b[key] ? 1 : b.total - a.total;
    });
    var ths = document.querySelectorAll('#top th');
    for (var i = 0; i < ths.length; i++) ths[i].classList.toggle('sorted', ths[i].dataset.key === key);
    var tb = document.querySelector('#top tbody'), tot = doc.total.bytes || 1, html = [];
    var esc = function (s) { return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;'); };
    topRows.slice(0, 300).forEach(function (r) {
      html.push('<tr><td class="' + r.kind + '">' + esc(r.name) + '</td><td class="num">' + human(r.self) + (r.self > 0 ? pm(r.selfCI) : '') + ' (' + (100 * r.self / tot).toFixed(1) +
        '%)</td><td class="num">' + human(r.total) + pm(r.totalCI) + ' (' + (100 * r.total / tot).toFixed(1) + '%)</td><td>' + r.kind + '</td></tr>');
    });
    tb.innerHTML = html.join('');
  }

  // ---- timeline ---------------------------------------------------------
  function drawTimeline() {
    var c = $('timeline'), W = c.parentNode.clientWidth || 1000, H = 160, dpr = window.devicePixelRatio || 1;
    c.width = W * dpr; c.height = H * dpr; c.style.height = H + 'px';
    var ctx = c.getContext('2d'); ctx.setTransform(dpr, 0, 0, dpr, 0, 0); ctx.clearRect(0, 0, W, H);
    var tl = doc.timeline;
    ctx.font = '11px system-ui, sans-serif';
    if (!tl) { ctx.fillText('no timeline in this document', 8, 20); return; }
    var end = Math.max(tl.end, 1e-9), top = 1;
    tl.total.forEach(function (p) { top = Math.max(top, p[1]); });
    tl.total_rss.forEach(function (p) { top = Math.max(top, p[1]); });
    var glibcFree = tl.malloc_free || [], mapped = (tl.kinds && tl.kinds.mmap) || [];
    glibcFree.forEach(function (p) { top = Math.max(top, p[1]); });
    var L = 64, R = 8, T = 8, B = 20, w = W - L - R, h = H - T - B;
    var X = function (t) { return L + w * t / end; }, Y = function (v) { return T + h - h * v / top; };
    ctx.strokeStyle = '#ccc'; ctx.fillStyle = '#666'; ctx.beginPath(); ctx.moveTo(L, T); ctx.lineTo(L, T + h); ctx.lineTo(L + w, T + h); ctx.stroke();
    ctx.fillText(human(top), 2, T + 8); ctx.fillText('0', L - 12, T + h); ctx.fillText(secs(end), L + w - 50, H - 4); ctx.fillText('0 s', L, H - 4);
    function line(pts, style, step) {
      if (!pts.length) return;
      ctx.strokeStyle = style; ctx.lineWidth = 1.5; ctx.beginPath(); ctx.moveTo(X(pts[0][0]), Y(pts[0][1]));
      for (var i = 1; i < pts.length; i++) { if (step) ctx.lineTo(X(pts[i][0]), Y(pts[i - 1][1])); ctx.lineTo(X(pts[i][0]), Y(pts[i][1])); }
      if (step) ctx.lineTo(X(end), Y(pts[pts.length - 1][1]));
      ctx.stroke(); ctx.lineWidth = 1;
    }
    line(tl.total_rss, '#999', false);
    line(glibcFree, '#e08a00', true);
    if (mapped.some(function (p) { return p[1] > 0; })) line(mapped, '#8a3fd0', true);
    line(tl.total, '#1f6fd0', true);
    var legend = [['estimated heap', '#1f6fd0'], ['RSS', '#999']];
    if (glibcFree.length) legend.push(['free in glibc arenas', '#e08a00']);
    if (mapped.some(function (p) { return p[1] > 0; })) legend.push(['of which mappings', '#8a3fd0']);
    var lx = L + 8;
    legend.forEach(function (it) {
      ctx.fillStyle = it[1]; ctx.fillRect(lx, T + h - 10, 10, 3); ctx.fillStyle = '#666';
      ctx.fillText(it[0], lx + 14, T + h - 6); lx += 24 + ctx.measureText(it[0]).width;
    });
    ctx.strokeStyle = '#d00'; ctx.fillStyle = '#d00'; ctx.beginPath(); ctx.moveTo(X(tl.peak.t), T); ctx.lineTo(X(tl.peak.t), T + h); ctx.stroke();
    var txt = 'peak ' + human(tl.peak.bytes) + ' at ' + secs(tl.peak.t);
    ctx.fillText(txt, Math.min(X(tl.peak.t) + 4, W - ctx.measureText(txt).width - 4), T + 10);
    if (doc.view === 'live' && doc.at != null) {
      ctx.strokeStyle = '#090'; ctx.beginPath(); ctx.moveTo(X(doc.at), T); ctx.lineTo(X(doc.at), T + h); ctx.stroke();
    }
    c.dataset.peakT = String(tl.peak.t); c.dataset.peakBytes = String(tl.peak.bytes);
    c.onclick = MODE.server ? function (ev) {
      var r = c.getBoundingClientRect(), t = (ev.clientX - r.left - L) / w * end;
      if (t < 0) return;
      $('at-input').value = t.toFixed(3); $('view-select').value = 'live'; refresh();
    } : null;
  }

  // ---- header -----------------------------------------------------------
  function drawHeader() {
    document.title = 'heaplens ' + doc.view + ': ' + doc.command.join(' ');
    $('title-view').textContent = '\u2014 ' + doc.view + ' view';
    var f = [];
    function add(k, v) { f.push('<dt>' + k + '</dt><dd>' + String(v).replace(/&/g, '&amp;').replace(/</g, '&lt;') + '</dd>'); }
    add('view', doc.view + (doc.at != null ? ' at ' + secs(doc.at) + ' (estimated heap ' + human(doc.heap_at) + ')' : '') +
      (doc.lifetime != null ? ' (freed within ' + (doc.lifetime * 1000) + ' ms)' : ''));
    add('command', doc.command.join(' ') || '?');
    add('rate', doc.rate <= 1 ? 'every allocation sampled: values are exact' : human(doc.rate) + ' mean bytes between samples');
    // Processes without a sample in this view are one count per command.
    var inView = {}, shown = [], quiet = {}, names = [];
    doc.samples.stream.forEach(function (s) { inView[s] = true; });
    doc.processes.forEach(function (p) {
      if (inView[p.stream]) { shown.push(p.label + ' ' + p.status); return; }
      var name = p.label.replace(/^\[\d+ ?/, '').replace(/\]$/, '') || '?';
      if (!quiet[name]) names.push(name);
      quiet[name] = (quiet[name] || 0) + 1;
    });
    if (names.length) shown.push(names.reduce(function (n, k) { return n + quiet[k]; }, 0) + ' more with no samples: ' +
      names.map(function (k) { return k + ' \u00d7' + quiet[k]; }).join(', '));
    add('processes', doc.processes.length + ': ' + shown.join(', '));
    add('dropped', doc.drops.allocs + ' alloc records, ' + doc.drops.frees + ' free records, ' + doc.drops.lost_bytes + ' lost ring bytes');
    add('total', human(doc.total.bytes) + pm(doc.total.bytes_ci95) + ' (' + doc.total.bytes + ' bytes), ' + doc.total.objects + ' objects, ' + doc.total.samples + ' samples');
    if (doc.rate > 1) add('estimates', 'each sampled allocation of s bytes stands for 1/(1-(1-1/rate)^s) allocations; ± is a 95 % interval computed from the samples');
    if (doc.timeline) add('peak', human(doc.timeline.peak.bytes) + ' estimated at ' + secs(doc.timeline.peak.t) +
      (doc.timeline.rss_high_water ? '; RSS peak ' + human(doc.timeline.rss_high_water) + ' exact (the kernel\u2019s high-water mark)' : '') +
      (doc.timeline.peak_rss ? '; sampled RSS at most ' + human(doc.timeline.peak_rss.bytes) + ' at ' + secs(doc.timeline.peak_rss.t) : ''));
    if (doc.filter) { var ks = Object.keys(doc.filter); if (ks.length) add('filters', ks.map(function (k) { return k + '=' + doc.filter[k]; }).join(' ')); }
    $('facts').innerHTML = f.join('');
    $('notes').textContent = (doc.notes || []).join('; ');
    if (MODE.server) {
      var ps = $('pid-select'), cur = ps.value, seen = {};
      if (ps.options.length <= 1) {
        doc.processes.forEach(function (p) {
          if (seen[p.pid]) return; seen[p.pid] = 1;
          var o = document.createElement('option'); o.value = p.pid; o.textContent = p.label; ps.appendChild(o);
        });
        ps.value = cur;
      }
      $('at-label').style.display = $('view-select').value === 'live' ? '' : 'none';
    }
  }

  // ---- render -----------------------------------------------------------
  function render(d) {
    doc = d;
    tree = buildTree(d);
    zoom = restoreZoom();
    drawHeader();
    drawTimeline();
    applySearch(); // draws the flame graph
    buildTop();
    renders++;
    document.body.dataset.view = d.view;
    document.body.dataset.renders = String(renders);
    if (!document.body.dataset.rendered) {
      // ms since navigation start (what a user waits), and ms of script work.
      document.body.dataset.rendered = performance.now().toFixed(1);
      document.body.dataset.renderMs = (performance.now() - T0).toFixed(1);
    }
  }

  function query() {
    var p = new URLSearchParams();
    p.set('view', $('view-select').value);
    if ($('pid-select').value) p.set('pid', $('pid-select').value);
    if ($('view-select').value === 'live') p.set('at', $('at-input').value + 's');
    return p.toString();
  }

  var inflight = false;
  function refresh() {
    if (inflight) return;
    inflight = true;
    fetch('api/profile?' + query()).then(function (r) {
      if (!r.ok) return r.text().then(function (t) { throw new Error(t); });
      return r.json();
    }).then(function (d) {
      inflight = false; render(d);
      if (MODE.live) $('live-status').textContent = 'live: updated ' + new Date().toLocaleTimeString();
    }).catch(function (e) { inflight = false; $('notes').textContent = 'error: ' + e.message; });
  }

  function init() {
    if (!MODE.server) document.body.classList.add('static');
    var vs = $('view-select');
    VIEWS.forEach(function (v) { var o = document.createElement('option'); o.value = o.textContent = v; vs.appendChild(o); });
    vs.value = MODE.view || 'peak';
    vs.onchange = function () { zoomPath = []; refresh(); };
    $('pid-select').onchange = function () { zoomPath = []; refresh(); };
    $('at-input').onchange = refresh;
    var timer = null;
    $('search').oninput = function () { clearTimeout(timer); timer = setTimeout(applySearch, 120); };
    $('reset-zoom').onclick = function () { setZoom(0); };
    var c = $('flame'), tip = $('tip');
    c.onclick = function (ev) {
      var r = c.getBoundingClientRect(), n = nodeAt(ev.clientX - r.left, ev.clientY - r.top);
      if (n >= 0) setZoom(n === zoom ? tree.parent[n] > 0 ? tree.parent[n] : 0 : n);
    };
    c.onmousemove = function (ev) {
      var r = c.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top, n = nodeAt(x, y);
      if (n < 0) { tip.hidden = true; return; }
      var tot = tree.value[0] || 1;
      tip.textContent = label(n) + '\n' + human(tree.value[n]) + ' (' + (100 * tree.value[n] / tot).toFixed(2) + '%) ' + kind(n);
      tip.hidden = false; tip.style.left = Math.min(x + 12, r.width - 300) + 'px'; tip.style.top = (y + 14) + 'px';
    };
    c.onmouseleave = function () { tip.hidden = true; };
    var ths = document.querySelectorAll('#top th');
    for (var i = 0; i < ths.length; i++) ths[i].onclick = function () { sortTop(this.dataset.key); };
    window.addEventListener('resize', function () { if (tree) { drawFlame(); drawTimeline(); } });
    var embedded = $('heaplens-data').textContent.trim();
    if (embedded.charAt(0) === '{') render(JSON.parse(embedded));
    else if (MODE.server) refresh();
    if (MODE.live) setInterval(refresh, MODE.interval || 1000);
  }

  // Test and scripting hooks.
  window.heaplens = {
    // findNode returns the page coordinates of the centre of the widest
    // drawn frame whose label contains s, or null.
    findNode: function (s) {
      var best = -1;
      for (var n = 1; n < tree.n; n++) if (label(n).indexOf(s) >= 0 && (best < 0 || tree.value[n] > tree.value[best])) best = n;
      if (best < 0) return null;
      var W = $('flame').clientWidth, chain = ancestors(best);
      if (chain.indexOf(zoom) < 0 && best !== zoom) return null;
      var x0 = 0, scale = W / tree.value[zoom], n2 = best, path = [];
      while (n2 !== zoom) { path.unshift(n2); n2 = tree.parent[n2]; }
      var cur = zoom;
      path.forEach(function (p) {
        for (var i = tree.kidStart[cur], e = i + tree.kidCount[cur]; i < e; i++) { var k = tree.kids[i]; if (k === p) break; x0 += tree.value[k] * scale; }
        cur = p;
      });
      var r = $('flame').getBoundingClientRect();
      return { x: r.left + window.scrollX + x0 + tree.value[best] * scale / 2, y: r.top + window.scrollY + tree.depth[best] * ROW + ROW / 2, label: label(best) };
    },
    state: function () { return { view: doc && doc.view, zoom: zoom === 0 ? '' : label(zoom), nodes: tree ? tree.n : 0 }; }
  };

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init); else init();
})();
