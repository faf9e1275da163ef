/* gtpo-report: draws the page from the JSON block #report-data with uPlot (inlined beside this file).
   Every string from the data reaches the DOM as textContent. window.gtpoReport exposes the charts
   (uPlot instances and what each series is) for checks that read the page back. */
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  // Tableau 10: one colour per method (a run without seeds is its own method)
  const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
  const STEP_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000];  // whole steps only
  const DASHES = [[], [7, 4], [2, 3], [9, 3, 2, 3], [1, 2], [12, 6]];
  const LEGEND_ROWS = 6;  // a chart's legend with more lines than this scrolls
  const report = (window.gtpoReport = { charts: [], bars: [], tables: [], drawn: 0, pending: 0, done: false, drawMs: null });
  const started = performance.now();

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function add(parent, tag, className, text) {
    const node = el(tag, className, text);
    parent.appendChild(node);
    return node;
  }
  function fmt(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "—";
    if (Number.isInteger(v) && Math.abs(v) < 1e15) return String(v);
    return String(+v.toPrecision(6));
  }
  function alpha(hex, a) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${a})`;
  }
  // base64 float64, little-endian (every browser platform is little-endian)
  function decode(b64) {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return new Float64Array(bytes.buffer);
  }

  // ---- runs and methods ----
  const runs = DATA.runs.map((r, index) => ({ ...r, index, stepsArr: decode(r.steps), cache: new Map() }));
  function values(run, metric) {
    if (!(metric in run.values)) return null;
    if (!run.cache.has(metric)) {
      const column = run.values[metric];
      let ys = column;
      if (typeof column === "string") ys = decode(column);
      else {  // sparse: [int32 indices, float64 values]
        const bin = atob(column[0]);
        const bytes = new Uint8Array(bin.length);
        for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
        const where = new Int32Array(bytes.buffer), logged = decode(column[1]);
        ys = new Float64Array(run.stepsArr.length).fill(NaN);
        where.forEach((w, i) => { ys[w] = logged[i]; });
      }
      run.cache.set(metric, ys);
    }
    return run.cache.get(metric);
  }
  const groups = [];
  for (const run of runs) {
    let group = groups.find((g) => g.name === run.group);
    if (!group) groups.push((group = { name: run.group, runs: [], color: PALETTE[groups.length % PALETTE.length] }));
    group.runs.push(run);
  }
  report.groups = groups.map((g) => ({ name: g.name, color: g.color, runs: g.runs.map((r) => r.name) }));

  // ---- one chart: the panel's metrics × methods; several seeds → mean, min–max band, thin seed lines ----
  function chartData(panel) {
    const metrics = panel.metrics;
    const only = panel.runs ? new Set(panel.runs) : null;
    const skipped = new Set((panel.skip || []).map(([run, metric]) => run + "\u0000" + metric));
    const lines = [];
    const steps = new Set();
    metrics.forEach((metric, mi) => {
      for (const group of groups) {
        const members = group.runs
          .filter((run) => (!only || only.has(run.name)) && !skipped.has(run.name + "\u0000" + metric))
          .map((run) => ({ run, ys: values(run, metric) }))
          .filter((m) => m.ys && m.ys.some((y) => !Number.isNaN(y)));
        if (!members.length) continue;
        const suffix = metrics.length > 1 ? ` · ${metric}` : "";
        for (const m of members) {
          m.run.stepsArr.forEach((s, i) => { if (!Number.isNaN(m.ys[i])) steps.add(s); });
          const seedLine = members.length > 1;
          lines.push({ kind: seedLine ? "seed" : "run", run: m.run.name, metric, group: group.name, label: m.run.name + suffix,
                       color: seedLine ? alpha(group.color, 0.45) : group.color, width: seedLine ? 1 : 2,
                       dash: DASHES[mi % DASHES.length], source: m });
        }
        if (members.length > 1) {
          const label = `${group.name} (${members.length} seeds)` + suffix;
          for (const kind of ["mean", "min", "max"]) {
            lines.push({ kind, run: null, metric, group: group.name, members, label: kind === "mean" ? `${label} mean` : `${label} ${kind}`,
                         color: kind === "mean" ? group.color : alpha(group.color, 0.35), width: kind === "mean" ? 2.5 : 0.5,
                         dash: DASHES[mi % DASHES.length] });
          }
        }
      }
    });
    const xs = Float64Array.from(steps).sort();
    const at = new Map();
    xs.forEach((s, i) => at.set(s, i));
    const columns = lines.map((line) => {
      const y = new Array(xs.length).fill(null);
      if (line.source) {
        const { run, ys } = line.source;
        run.stepsArr.forEach((s, i) => { if (!Number.isNaN(ys[i])) y[at.get(s)] = ys[i]; });
      }
      return y;
    });
    // mean / min / max over seeds at the steps where every seed logged the metric
    lines.forEach((line, li) => {
      if (line.source) return;
      const seedCols = lines.map((l, j) => [l, j]).filter(([l]) => l.kind === "seed" && l.metric === line.metric && l.group === line.group).map(([, j]) => columns[j]);
      const out = columns[li];
      for (let i = 0; i < xs.length; i++) {
        let sum = 0, lo = Infinity, hi = -Infinity, complete = true;
        for (const col of seedCols) {
          const v = col[i];
          if (v === null) { complete = false; break; }
          sum += v; lo = Math.min(lo, v); hi = Math.max(hi, v);
        }
        if (complete) out[i] = line.kind === "mean" ? sum / seedCols.length : line.kind === "min" ? lo : hi;
      }
    });
    return { xs, lines, columns };
  }

  function lastIndices(data) {
    return data.map((col) => { for (let i = col.length - 1; i >= 0; i--) if (col[i] !== null) return i; return null; });
  }

  function drawLine(card, section, panel, width, height) {
    const { xs, lines, columns } = chartData(panel);
    const data = [Array.from(xs), ...columns];
    // away from the chart the legend holds each line's last logged value, each at its own step
    const series = [{ label: "step", value: (u, v) => (u.cursor.idx == null ? "last logged" : fmt(v)) }].concat(lines.map((l) => ({
      label: l.label, stroke: l.color, width: l.width, dash: l.dash, spanGaps: true, value: (u, v) => fmt(v),
      points: { show: (u, si) => xs.length < 60 || data[si].filter((v) => v !== null).length < 60, size: 4 },
    })));
    const bands = [];
    lines.forEach((l, i) => {
      if (l.kind === "max") {
        const lo = lines.findIndex((m) => m.kind === "min" && m.group === l.group && m.metric === l.metric);
        bands.push({ series: [i + 1, lo + 1], fill: l.color.replace(/[\d.]+\)$/, "0.15)") });
      }
    });
    const last = lastIndices(data);
    const opts = {
      width, height, series, bands,
      // a flat line (a flag that stayed 0) gets a ±1 range, not uPlot's 0–100
      scales: { x: { time: false }, y: { range: (u, min, max) => (min === max ? [min - 1, max + 1] : uPlot.rangeNum(min, max, 0.1, true)) } },
      axes: [{ label: "step", size: 36, labelSize: 14, incrs: STEP_INCRS }, { size: 62 }],
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
      hooks: { setCursor: [(u) => { if (u.cursor.idx == null) u.setLegend({ idxs: last }); }] },
    };
    const u = new uPlot(opts, data, card.querySelector(".chart"));
    u.setLegend({ idxs: last });
    if (lines.length > LEGEND_ROWS) card.classList.add("long-legend");  // scrolls; the page legend names the colours
    report.charts.push({ section: section.title, title: panel.title, other: !!section.other, u,
                         series: lines.map((l) => ({ label: l.label, kind: l.kind, run: l.run, metric: l.metric, group: l.group,
                                                     members: l.members ? l.members.map((m) => m.run.name) : null })) });
  }

  // one bar per value, metric by metric, on one axis from min(0, values) to max(0, values)
  function drawBars(card, section, panel) {
    const box = card.querySelector(".chart");
    const vals = panel.bars.map((b) => b.value);
    const lo = Math.min(0, ...vals), hi = Math.max(0, ...vals), span = hi - lo || 1;
    const shown = [];
    let metric = null;
    for (const bar of panel.bars) {
      if (panel.metrics.length > 1 && bar.metric !== metric) add(box, "div", "bar-metric", (metric = bar.metric));
      const row = add(box, "div", "bar-row");
      const group = groups.find((g) => g.runs.some((r) => r.name === bar.run));
      add(row, "span", "bar-label", `${bar.run} · step ${bar.step}`);
      const track = add(row, "span", "bar-track");
      const fill = add(track, "span", "bar-fill");
      fill.style.left = `${(100 * (Math.min(bar.value, 0) - lo)) / span}%`;
      fill.style.width = `${Math.max((100 * Math.abs(bar.value)) / span, 0.5)}%`;
      fill.style.background = group.color;
      const text = add(row, "span", "bar-value", fmt(bar.value)).textContent;
      shown.push({ run: bar.run, metric: bar.metric, step: bar.step, value: bar.value, text });
    }
    report.bars.push({ section: section.title, title: panel.title, bars: shown });
  }

  function drawTable(card, section, panel) {
    const table = add(card.querySelector(".chart"), "table");
    const tr = add(table, "tr");
    for (const h of panel.header) add(tr, "th", null, h);
    for (const cells of panel.rows) {
      const row = add(table, "tr");
      cells.forEach((cell, i) => add(row, "td", i ? "mono" : null, typeof cell === "number" ? fmt(cell) : cell === null ? "—" : cell));
    }
    report.tables.push({ section: section.title, title: panel.title, rows: panel.rows.length });
  }

  const DRAW = { line: drawLine, bars: drawBars, table: drawTable };
  function draw(card, section, panel, width, height) {
    DRAW[panel.draw](card, section, panel, width, height);
    card.dataset.drawn = "1";
    report.drawn += 1;
  }

  function panelCard(grid, panel) {
    const card = add(grid, "div", "card");
    card.dataset.draw = panel.draw;
    add(card, "h3", null, panel.title);
    const metrics = panel.metrics || [];
    if (metrics.length > 1 || (metrics.length && panel.title !== metrics[0])) add(card, "div", "metrics", metrics.join(", "));
    add(card, "div", "chart");
    if (panel.note) add(card, "p", "meta", panel.note);
    return card;
  }

  // draw in slices so a page of hundreds of charts stays responsive; `done` once all queued are drawn
  const queue = [];
  function schedule() {
    const t = performance.now();
    while (queue.length && performance.now() - t < 40) {
      const job = queue.shift();
      try { job(); } catch (error) { console.error("gtpo-report: chart failed:", error); }
      report.pending -= 1;
    }
    if (queue.length) requestAnimationFrame(schedule);
    else if (!report.done) {
      report.done = true;
      if (report.drawMs === null) report.drawMs = performance.now() - started;  // the first screen: every panel
      document.body.dataset.drawn = String(report.drawn);
    }
  }
  function enqueueSection(section, grid) {
    const cards = section.panels.map((panel) => panelCard(grid, panel));
    const lineCard = cards.find((card) => card.dataset.draw === "line");  // tables and bars span the row
    const width = Math.max(280, (lineCard ? lineCard.clientWidth : 400) - 18);
    const height = section.other ? 170 : grid.classList.contains("first") ? 190 : 220;
    section.panels.forEach((panel, i) => {
      report.pending += 1;
      queue.push(() => draw(cards[i], section, panel, width, height));
    });
  }

  // ---- the page ----
  const body = document.body;
  const header = add(body, "header");
  add(header, "h1", null, DATA.title);
  add(header, "p", "meta", `generated ${DATA.generated} by gtpo_verl ${DATA.version} · ${runs.length} run(s) · ` +
      "self-contained: this file makes no network request · legend: values at the cursor, else each line's last logged value · drag to zoom, double-click to reset");
  const rewrites = runs.filter((r) => r.rewritten);
  if (rewrites.length) {
    add(body, "p", "notice", `Requeued or resumed runs: ${rewrites.map((r) => r.name).join(", ")} logged some steps more than once ` +
        "(their metrics files are read in the order written); every chart shows the last value written at each step. Their notes list the steps.");
  }

  // one legend for the page, always in view: a colour per method; each chart's own legend adds values
  const nav = add(body, "nav");
  const pageLegend = add(nav, "div", "page-legend");
  for (const group of groups) {
    const item = add(pageLegend, "span", "legend-item");
    add(item, "span", "swatch").style.background = group.color;
    item.appendChild(document.createTextNode(group.runs.length > 1 ? `${group.name} (${group.runs.length} seeds)` : group.name));
  }
  const toc = add(nav, "div", "toc");
  const main = add(body, "main");

  function runsSection() {
    const box = add(main, "section", "runs");
    box.id = "runs";
    add(box, "h2", null, "runs");
    add(toc, "a", null, "runs").href = "#runs";
    const runsTable = add(box, "table");
    const head = add(runsTable, "tr");
    for (const h of ["run", "method", "seed", "steps", "metrics files (rows, steps)", "rewritten steps", "warnings", "notes"]) add(head, "th", null, h);
    for (const run of runs) {
      const tr = add(runsTable, "tr");
      const swatch = add(tr, "td");
      add(swatch, "span", "swatch").style.background = groups.find((g) => g.name === run.group).color;
      swatch.appendChild(document.createTextNode(run.name));
      add(tr, "td", null, run.group);
      add(tr, "td", null, run.seed === null ? "—" : run.seed);
      const s = run.stepsArr;
      add(tr, "td", null, s.length ? `${s[0]}–${s[s.length - 1]} (${s.length})` : "—");
      add(tr, "td", "files", run.files.map((f) => `${f.path} (${f.rows}, ${f.first}–${f.last})`).join("\n"));
      add(tr, "td", run.rewritten ? "warn" : null, run.rewritten);
      add(tr, "td", run.warnings.length + run.log_warnings.length ? "warn" : null, run.warnings.length + run.log_warnings.length);
      add(tr, "td", run.notes.length ? "warn" : null, run.notes.length);
    }
  }

  DATA.sections.forEach((section, index) => {
    const id = "s-" + section.title.replace(/[^A-Za-z0-9]+/g, "-");
    const link = add(toc, "a", section.other ? "other" : null, section.title);
    link.href = "#" + id;
    const box = add(main, "section", index === 0 ? "panels first" : "panels");
    box.id = id;
    let grid;
    if (section.other) {
      const details = add(box, "details");
      add(details, "summary", null, `${section.title} (${section.panels.length} charts, drawn when opened)`);
      grid = add(details, "div", "grid small");
      details.addEventListener("toggle", () => {
        if (details.open && !details.dataset.queued) {
          details.dataset.queued = "1";
          report.done = false;
          enqueueSection(section, grid);
          requestAnimationFrame(schedule);
        }
      });
    } else {
      add(box, "h2", null, section.title);
      grid = add(box, "div", index === 0 ? "grid first" : "grid");
    }
    if (section.missing.length) add(box, "p", "missing", "not logged by these runs: " + section.missing.join("; "));
    if (!section.other) enqueueSection(section, grid);
    if (index === 0) runsSection();  // the first screen stays on top; the runs table right below it
  });
  if (!DATA.sections.length) runsSection();

  // ---- warnings, notes, configs ----
  const warn = add(main, "section", "warnings");
  warn.id = "warnings";
  add(warn, "h2", null, "warnings and notes");
  add(toc, "a", null, "warnings and notes").href = "#warnings";
  for (const run of runs) {
    add(warn, "h3", null, run.name);
    const lists = [["warnings the run raised (from its gtpo/* flags)", run.warnings],
                   ["gtpo_verl warnings in its logs", run.log_warnings], ["notes on its metrics files", run.notes]];
    let any = false;
    for (const [title, items] of lists) {
      if (!items.length) continue;
      any = true;
      add(warn, "h4", null, title);
      const ul = add(warn, "ul");
      for (const item of items) add(ul, "li", null, item);
    }
    if (!any) add(warn, "p", null, "none");
  }

  const cfg = add(main, "section", "config");
  cfg.id = "config";
  add(cfg, "h2", null, "configs");
  add(toc, "a", null, "configs").href = "#config";
  if (DATA.config_diff.keys.length) {
    add(cfg, "h3", null, "keys that differ between runs");
    const table = add(cfg, "table");
    const tr = add(table, "tr");
    add(tr, "th", null, "key");
    for (const run of runs) add(tr, "th", null, run.name);
    DATA.config_diff.keys.forEach((key, i) => {
      const row = add(table, "tr");
      add(row, "td", "mono", key);
      for (const v of DATA.config_diff.values[i]) add(row, "td", "mono", v);
    });
  }
  for (const run of runs) {
    add(cfg, "h3", null, run.name);
    if (!run.config_path) { add(cfg, "p", null, "no config found beside its metrics (.hydra/config.yaml or config.yaml in its folder)"); continue; }
    add(cfg, "p", "meta", run.config_path);
    const table = add(cfg, "table");
    for (const [k, v] of run.key_settings) { const row = add(table, "tr"); add(row, "td", "mono", k); add(row, "td", "mono", v); }
    const details = add(cfg, "details");
    add(details, "summary", null, `full config (${run.config.length} keys)`);
    const pre = add(details, "pre");
    pre.textContent = run.config.map(([k, v]) => `${k}: ${v}`).join("\n");
  }

  requestAnimationFrame(schedule);
})();
