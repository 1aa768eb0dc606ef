// The console's front end: plain JavaScript over the JSON API and the /ws stream (no build step).
"use strict";

const $ = (selector) => document.querySelector(selector);
let me = null;          // {user, role, csrf}
let fleet = null;       // the latest snapshot from /ws
let socket = null;
let held = null;        // the robot this user drives, if any
const renderTimes = window.renderTimes = [];  // ms per state update, the page's own responsiveness
const keys = new Set();
let grip = -1;

async function api(path, body) {
  const options = { credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    options.method = "POST";
    options.headers["Content-Type"] = "application/json";
    if (me && me.csrf) options.headers["X-CSRF-Token"] = me.csrf;
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function status(text) { $("#status").textContent = text; }  // the fleet line, rewritten with every update
function notice(text) { $("#notice").textContent = text; }  // what an action did; stays until the next one

async function act(robot, action, body = {}) {
  try {
    const result = await api(`/api/robots/${encodeURIComponent(robot)}/${action}`, body);
    if (action === "takeover") { held = robot; showPage("teleop"); }
    if (action === "release") held = null;
    notice(action === "rewind" ? `${robot}: rewound ${result.steps_undone} steps` : `${robot}: ${action} done`);
  } catch (error) {
    notice(`${robot} ${action}: ${error.message}`);
  }
}

function button(label, onClick, cls = "") {
  const b = document.createElement("button");
  b.textContent = label;
  if (cls) b.className = cls;
  b.addEventListener("click", onClick);
  return b;
}

const thumbnails = new Map();  // robot → its <img>, kept across renders so it reloads once a second, not per update
let frameStamp = 0;
setInterval(() => { frameStamp += 1; }, 1000);

// A sim robot's view, painted for people (a card's thumbnail once a second, the driven robot's ten times), arrives
// over the WebSocket as binary messages: a JSON header line, then the JPEG. The page says which views it watches;
// the newest frame replaces the shown one, so a frame not painted yet never blanks the picture.
const views = new Map();  // "robot:size" → the shown <img>
const frames = new Map();  // robot → the object URL of its newest frame
const frameAges = window.frameAges = [];  // seconds from painting to arrival, read by benchmarks/console_load.py
let watching = "";  // the views last asked for, as sent
function viewImage(robot, size) {
  const key = `${robot}:${size}`;
  if (!views.has(key)) {
    const img = document.createElement("img");
    img.className = size === "large" ? "view" : "thumb";
    img.alt = `${robot}'s view`;
    views.set(key, img);
  }
  const img = views.get(key);
  if (frames.has(robot) && img.src !== frames.get(robot)) img.src = frames.get(robot);
  return img;
}

function showFrame(data) {
  const bytes = new Uint8Array(data);
  const split = bytes.indexOf(10);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(0, split)));
  const url = URL.createObjectURL(new Blob([bytes.subarray(split + 1)], { type: "image/jpeg" }));
  const previous = frames.get(header.robot);
  frames.set(header.robot, url);
  for (const size of ["thumb", "large"]) {
    const img = views.get(`${header.robot}:${size}`);
    if (img) img.src = url;
  }
  if (previous) setTimeout(() => URL.revokeObjectURL(previous), 2000);  // after the images have decoded it
  frameAges.push(Date.now() / 1000 - header.painted);
  if (frameAges.length > 1000) frameAges.shift();
}

function watchViews() {  // thumbnails of the cards on the fleet page, the large view of the robot being driven
  if (!fleet || !fleet.running || !socket || socket.readyState !== WebSocket.OPEN) return;
  const wanted = {};
  if (!$("#page-fleet").hidden) for (const r of fleet.robots) if (r.view) wanted[r.robot] = "thumb";
  const card = held && fleet.robots.find((r) => r.robot === held);
  if (card && card.view) wanted[held] = "large";
  const asked = JSON.stringify(wanted);
  if (asked !== watching) {
    watching = asked;
    socket.send(JSON.stringify({ type: "views", views: wanted }));
  }
}

function thumbnail(robot, camera, stamp) {
  const key = `${robot}/${camera}`;
  if (!thumbnails.has(key)) {
    const img = document.createElement("img");
    img.className = "thumb";
    img.alt = `${robot} ${camera} camera`;
    thumbnails.set(key, img);
  }
  const img = thumbnails.get(key);
  const src = `/api/robots/${encodeURIComponent(robot)}/image?camera=${camera}&t=${stamp}`;
  if (img.dataset.src !== src) { img.dataset.src = src; img.src = src; }
  return img;
}

// -- charts (uPlot, fetched by version from the npm registry when the package is built) -------------------------
const KIND_COLOURS = {
  progress: "rgba(46, 125, 50, 0.15)", idle: "rgba(158, 158, 158, 0.2)", failure_inducing: "rgba(198, 40, 40, 0.18)",
  recovery: "rgba(21, 101, 192, 0.15)", intervention: "rgba(239, 108, 0, 0.15)", rewind: "rgba(106, 27, 154, 0.15)",
};
const charting = typeof uPlot !== "undefined";

function progressChart(width, height, options = {}) {
  return {
    width, height, legend: { show: Boolean(options.legend) }, scales: { x: { time: false }, y: { range: [0, 1] } },
    axes: options.axes ? [{ label: "step" }, { label: "progress", size: 50 }] : [{ show: false }, { show: false }],
    cursor: options.cursor || { show: false },
    series: [{}, { label: options.label || "progress", stroke: "#1565c0", width: 2, spanGaps: false,
      points: { show: Boolean(options.axes) } },
      ...(options.series || [])],
    hooks: options.hooks || {},
  };
}

const sparklines = window.sparklines = new Map();  // robot → [element, uPlot]: kept across renders, fed the latest curve
function sparkline(robot, curve, width = 220, height = 44) {
  if (!charting) return document.createTextNode("");
  let entry = sparklines.get(robot);
  if (!entry || entry[1].width !== width) {
    const element = document.createElement("div");
    element.className = "sparkline";
    entry = [element, new uPlot(progressChart(width, height), [[], []], element)];
    sparklines.set(robot, entry);
  }
  entry[1].setData([curve.map((_, i) => i), curve]);
  return entry[0];
}

const cueUntil = new Map();  // robot → when its "needs a person" cue ends (ms)
let needing = new Set();      // robots that needed a person at the last update

// The robots that need a person first (most urgent alert, then longest in that state), the rest in fleet order; a
// robot that starts needing one is cued for a few seconds, with a short tone and a count in the tab's title.
function attentionOrder(robots) {
  const rank = (r) => (r.attention === null ? Infinity : r.attention);
  return robots.map((r, i) => [r, i]).sort(([a, i], [b, j]) =>
    rank(a) - rank(b) || (a.attention === null ? i - j : b.in_state_s - a.in_state_s || i - j)).map(([r]) => r);
}

function cueNewcomers(robots) {
  const now = Date.now();
  const current = new Set(robots.filter((r) => r.attention !== null && r.attention <= 1).map((r) => r.robot));
  const newcomers = [...current].filter((robot) => !needing.has(robot));
  for (const robot of newcomers) cueUntil.set(robot, now + 5000);
  if (newcomers.length) tone();
  needing = current;
  document.title = current.size ? `(${current.size}) vla_recover console` : "vla_recover console";
}

function tone() {
  try {
    const context = tone.context || (tone.context = new AudioContext());
    const oscillator = context.createOscillator();
    const gain = context.createGain();
    gain.gain.value = 0.05;
    oscillator.frequency.value = 880;
    oscillator.connect(gain).connect(context.destination);
    oscillator.start();
    oscillator.stop(context.currentTime + 0.15);
  } catch (error) { /* no audio: the visual cue stays */ }
}

function renderCards() {
  const cards = $("#cards");
  cards.replaceChildren();
  cueNewcomers(fleet.robots);
  for (const r of attentionOrder(fleet.robots)) {
    const card = document.createElement("article");
    const cued = (cueUntil.get(r.robot) || 0) > Date.now();
    card.className = `card state-${r.state}${r.attention !== null ? " needs-person" : ""}${cued ? " cue" : ""}`;
    card.dataset.robot = r.robot;
    const progress = r.progress === null ? 0 : Math.round(r.progress * 100);
    card.innerHTML = `<h2><span>${r.robot}</span><span class="state">${r.state}</span></h2>
      <div class="instruction"></div>
      <div class="bar" title="${r.progress_source} progress"><div style="width:${progress}%"></div></div>
      <div class="meta">step ${r.step} · ${r.in_state_s.toFixed(1)} s in state${r.paused ? " · paused" : ""}
        ${r.lease ? ` · lease ${r.lease.operator} (${r.lease.expires_in_s.toFixed(0)} s)` : ""}</div>
      <div class="alerts">${r.alerts.map((a) => `<span>${a.replaceAll("_", " ")}</span>`).join("")}</div>
      <div class="buttons"></div>`;
    card.querySelector(".instruction").textContent = r.instruction;  // text, never markup
    if (r.view) card.insertBefore(viewImage(r.robot, "thumb"), card.querySelector(".bar"));  // painted for people
    else if (r.cameras.length) card.insertBefore(thumbnail(r.robot, r.cameras[0], frameStamp), card.querySelector(".bar"));
    if (r.curve.length > 1) card.querySelector(".bar").replaceWith(sparkline(r.robot, r.curve));
    const buttons = card.querySelector(".buttons");
    if (["floor", "admin"].includes(me.role)) {
      buttons.append(button("Request takeover", () => act(r.robot, "request_takeover")));
      buttons.append(button("Reset", () => act(r.robot, "reset")));
      if (r.awaiting_reset) buttons.append(button("Scene reset: start", () => act(r.robot, "confirm_reset")));
      buttons.append(button(r.paused ? "Resume" : "Pause", () => act(r.robot, r.paused ? "resume" : "pause")));
    }
    if (["teleop", "admin"].includes(me.role) && ["takeover_requested", "autonomous"].includes(r.state)) {
      buttons.append(button("Take over", () => act(r.robot, "takeover")));
    }
    if (me.role !== "viewer") buttons.append(button("E-stop", () => act(r.robot, "estop"), "estop"));
    cards.append(card);
  }
}

function renderQueue() {
  $("#queue-order").textContent = fleet.allocation === "priority"
    ? "Ordered by risk (progress lost), as the teleoperator allocation policy serves them."
    : "First come, first served.";
  const rows = $("#queue-rows");
  rows.replaceChildren();
  for (const item of fleet.queue) {
    const tr = document.createElement("tr");
    tr.innerHTML = `<td>${item.robot}</td><td>${item.waiting_s.toFixed(1)} s</td><td></td>`;
    if (["teleop", "admin"].includes(me.role)) tr.lastChild.append(button("Take over", () => act(item.robot, "takeover")));
    rows.append(tr);
  }
}

function renderTeleop() {
  const card = held && fleet.robots.find((r) => r.robot === held);
  $("#teleop-lease").textContent = card
    ? `Driving ${held} (${card.state}); lease ${card.lease ? card.lease.expires_in_s.toFixed(1) + " s left" : "lost"}.`
    : "You hold no robot. Take one over from the queue.";
  if (held && card && card.state !== "teleop" && card.state !== "rewinding") held = null;
  const images = $("#teleop-images");
  const shown = card ? [...(card.view ? [viewImage(card.robot, "large")] : []),
    ...card.cameras.map((c) => thumbnail(card.robot, c, teleopStamp))] : [];
  images.replaceChildren(...shown);
  $("#teleop-curve").replaceChildren(...(card && card.curve.length > 1 ? [sparkline(`teleop:${card.robot}`, card.curve, 480, 120)] : []));
  $("#teleop-state").textContent = card
    ? `${card.instruction}\nprogress ${card.progress === null ? "unknown" : Math.round(card.progress * 100) + "%"}` +
      `\nstate ${card.robot_state.map((x) => x.toFixed(3)).join("  ")}`
    : "";
}
let teleopStamp = 0;
setInterval(() => { teleopStamp += 1; }, 200);  // the task's cameras for the driver: five frames a second

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  socket = new WebSocket(`${scheme}://${location.host}/ws`);
  socket.binaryType = "arraybuffer";
  watching = "";  // a new connection watches nothing until told
  socket.onmessage = (event) => {
    if (event.data instanceof ArrayBuffer) { showFrame(event.data); return; }
    const message = JSON.parse(event.data);
    if (message.type === "fleet") {
      fleet = message;
      const started = performance.now();
      renderCards(); renderQueue(); renderTeleop(); watchViews();
      renderTimes.push(performance.now() - started);  // read by benchmarks/console_load.py
      if (renderTimes.length > 1000) renderTimes.shift();
      status(fleet.running
        ? `sim time ${fleet.sim_time.toFixed(1)} s · ${fleet.robots.length} robots${fleet.finished ? " · finished" : ""}`
        : "No fleet runs in this console (start it with --fleet); episodes and runs can be browsed.");
    } else if (message.type === "error") {
      notice(`command refused: ${message.error}`);
    }
  };
  socket.onclose = () => { status("connection lost; reconnecting"); setTimeout(connect, 1000); };
}

function teleopAction() {
  const dim = fleet ? fleet.action_dim : 5;
  const action = new Array(dim).fill(0);
  const axis = (plus, minus) => (keys.has(plus) ? 1 : 0) - (keys.has(minus) ? 1 : 0);
  action[0] = axis("w", "s"); action[1] = axis("a", "d"); action[2] = axis("r", "f");
  action[dim === 5 ? 3 : 5] = axis("q", "e");
  const pad = navigator.getGamepads ? [...navigator.getGamepads()].find((g) => g) : null;
  if (pad) {
    action[0] -= pad.axes[1] || 0; action[1] -= pad.axes[0] || 0; action[2] -= pad.axes[3] || 0;
    if (pad.buttons[0] && pad.buttons[0].pressed) grip = 1;
    if (pad.buttons[1] && pad.buttons[1].pressed) grip = -1;
  }
  action[dim - 1] = grip;
  return action.map((v) => Math.max(-1, Math.min(1, v)));
}

setInterval(() => {  // 20 Hz while driving: the robot holds when commands stop
  if (held && socket && socket.readyState === WebSocket.OPEN) {
    const action = teleopAction();
    socket.send(JSON.stringify({ type: "command", robot: held, action }));
    showInput(action);
  }
}, 50);

function showInput(action) {  // what the driver's hands are doing, as the robot receives it
  const pad = navigator.getGamepads ? [...navigator.getGamepads()].find((g) => g) : null;
  const pressed = [...keys].filter((k) => k.length === 1 && "wsadrfqe".includes(k)).map((k) => k.toUpperCase());
  $("#teleop-input").textContent = `${pad ? `gamepad ${pad.id}` : "keyboard"}` +
    ` · keys ${pressed.length ? pressed.join(" ") : "none"} · gripper ${grip > 0 ? "closed" : "open"}` +
    ` · sending [${action.map((v) => v.toFixed(2)).join(", ")}]`;
}

document.addEventListener("keydown", (event) => {
  if (event.target.tagName === "INPUT") return;
  if (event.key === " ") { grip = -grip; event.preventDefault(); }
  keys.add(event.key.toLowerCase());
});
document.addEventListener("keyup", (event) => keys.delete(event.key.toLowerCase()));

function showPage(name) {
  for (const page of document.querySelectorAll(".page")) page.hidden = page.id !== `page-${name}`;
  for (const link of document.querySelectorAll("nav a")) link.classList.toggle("active", link.dataset.page === name);
  if (name === "episodes") loadEpisodes();
  if (name === "runs") loadRuns();
}

async function loadRuns() {
  const rows = $("#run-rows");
  rows.replaceChildren();
  const percent = (x) => (x === null || x === undefined ? "-" : `${Math.round(x * 100)}%`);
  for (const run of await api("/api/runs")) {
    const tr = document.createElement("tr");
    const promoted = run.rounds.filter((r) => r.promoted).map((r) => `round ${r.round}`).join(", ") || "none";
    const operator = run.rounds.reduce((total, r) => total + (r.operator_s || 0), 0);
    const roh = run.rounds.map((r) => r.successes_per_operator_hour).filter((x) => x !== null && x !== undefined);
    tr.innerHTML = `<td></td><td>${run.task}</td><td>${run.method}</td>
      <td>${run.rounds.map((r) => percent(r.success_rate)).join(" → ")}</td><td>${promoted}</td>
      <td>${operator.toFixed(0)}</td><td>${roh.map((x) => x.toFixed(0)).join(", ") || "-"}</td>`;
    tr.firstChild.textContent = run.name;
    tr.addEventListener("click", () => showRun(run.name));
    rows.append(tr);
  }
}

async function showRun(name) {
  const run = await api(`/api/runs/${encodeURIComponent(name)}`);
  const view = $("#run-view");
  view.replaceChildren();
  for (const plot of run.plots) {
    const img = document.createElement("img");
    img.className = "plot";
    img.alt = plot;
    img.src = `/api/runs/${encodeURIComponent(name)}/plots/${encodeURIComponent(plot)}`;
    view.append(img);
  }
}

async function loadEpisodes() {
  const form = new FormData($("#episode-filter"));
  const query = new URLSearchParams([...form].filter(([, v]) => v));
  const rows = $("#episode-rows");
  rows.replaceChildren();
  for (const e of (await api(`/api/episodes?${query}`)).reverse()) {
    const tr = document.createElement("tr");
    tr.innerHTML = `<td>${e.id}</td><td>${e.robot}</td><td>${e.task}</td><td>${e.outcome}</td><td>${e.length}</td>`;
    tr.addEventListener("click", () => showEpisode(e.id));
    rows.append(tr);
  }
}

async function showEpisode(id) {
  const e = await api(`/api/episodes/${id}`);
  const view = $("#episode-view");
  view.innerHTML = `<h3>Episode ${e.id}: ${e.outcome}, ${e.length} steps</h3>`;
  for (const source of [...new Set(e.segments.map((s) => s.source))]) {
    const line = document.createElement("div");
    line.className = "timeline";
    line.title = source;
    for (const s of e.segments.filter((x) => x.source === source)) {
      const part = document.createElement("div");
      part.className = `kind-${s.kind}`;
      part.style.width = `${(100 * (s.stop - s.start)) / e.length}%`;
      part.title = `${s.kind} ${s.start}-${s.stop} (${source})`;
      part.dataset.kind = s.kind;
      line.append(part);
    }
    view.append(line);
  }
  // who chose each step's action, in runs: the policy, a human, a demonstrator, or no one (a hold, a rewind)
  const chosen = document.createElement("div");
  chosen.className = "timeline actors";
  chosen.title = "who chose the action";
  for (let start = 0; start < e.actor.length;) {
    let stop = start + 1;
    while (stop < e.actor.length && e.actor[stop] === e.actor[start]) stop += 1;
    const part = document.createElement("div");
    part.className = `actor-${e.actor[start]}`;
    part.style.width = `${(100 * (stop - start)) / e.length}%`;
    part.title = `${e.actor[start]} ${start}-${stop}`;
    part.dataset.actor = e.actor[start];
    chosen.append(part);
    start = stop;
  }
  if (e.actor.length) view.append(chosen);
  let chart = null;
  let pick = () => {};  // set below, once the frames' scrubber exists
  if (charting && e.length > 1) {
    const box = document.createElement("div");
    box.className = "chart";
    const shade = (u) => {  // the segments behind the curve, by kind (the critic's and people's labels)
      const { ctx, bbox } = u;
      for (const s of e.segments.filter((x) => x.source !== "supervision")) {
        const left = u.valToPos(s.start, "x", true), right = u.valToPos(s.stop, "x", true);
        ctx.fillStyle = KIND_COLOURS[s.kind] || "rgba(0, 0, 0, 0.05)";
        ctx.fillRect(left, bbox.top, right - left, bbox.height);
      }
    };
    const hooks = {
      drawClear: [shade],
      setCursor: [(u) => { if (u.cursor.idx != null) pick(u.cursor.idx); }],
      setSelect: [(u) => {  // a span selected on the chart fills the relabel form
        const start = Math.max(0, Math.round(u.posToVal(u.select.left, "x")));
        const stop = Math.min(e.length, Math.round(u.posToVal(u.select.left + u.select.width, "x")) + 1);
        const form = view.querySelector("form.relabel");
        if (form && u.select.width > 0) { form.start.value = start; form.stop.value = stop; }
      }],
    };
    const critic = e.critic ? [{ label: "critic", stroke: "#8e24aa", width: 2, dash: [6, 3] }] : [];
    chart = new uPlot(progressChart(Math.min(900, view.clientWidth || 640), 200, {
      legend: true, axes: true, cursor: { drag: { x: true, y: false, setScale: false } }, hooks, series: critic,
      label: "ground truth",
    }), [e.progress.map((_, i) => i), e.progress, ...(e.critic ? [e.critic] : [])], box);
    window.episodeChart = chart;  // read by the browser tests
    view.append(box);
  }
  const scrub = document.createElement("div");
  scrub.className = "scrub";
  scrub.innerHTML = `<label>Step <input type="range" min="0" max="${e.length - 1}" value="0"> <span></span></label>
    <div class="frames"></div><pre></pre>`;
  const show = async (index) => {
    const step = await api(`/api/episodes/${e.id}/steps/${index}`);
    scrub.querySelector("span").textContent = `${index} · ${step.actor} · progress ${step.progress}`;
    scrub.querySelector("pre").textContent = `state ${JSON.stringify(step.state)}\naction ${JSON.stringify(step.action)}`;
    scrub.querySelector(".frames").replaceChildren(...step.cameras.map((camera) => {
      const img = document.createElement("img");
      img.className = "frame";
      img.src = `/api/episodes/${e.id}/steps/${index}/image?camera=${camera}`;
      return img;
    }));
  };
  let pending = null;
  pick = (index) => {  // the chart's cursor scrubs the frames, at most ten requests a second
    scrub.querySelector("input").value = index;
    if (pending === null) pending = setTimeout(() => { pending = null; show(Number(scrub.querySelector("input").value)); }, 100);
  };
  scrub.querySelector("input").addEventListener("input", (event) => {
    show(Number(event.target.value));
    if (chart) chart.setCursor({ left: chart.valToPos(Number(event.target.value), "x"), top: 10 });
  });
  view.append(scrub);
  show(0);
  if (["floor", "admin"].includes(me.role)) {
    const verdict = document.createElement("div");  // an arm without a success detector: a person's verdict
    verdict.className = "verdict";
    verdict.append(`Outcome ${e.outcome}: `);
    for (const label of ["success", "failure", "unsure"]) {
      verdict.append(button(label, async () => {
        try {
          await api(`/api/episodes/${e.id}/outcome`, { label });
          notice(`episode ${e.id}: labelled ${label}`);
          showEpisode(e.id);
        } catch (error) { notice(`outcome: ${error.message}`); }
      }));
    }
    view.append(verdict);
    const form = document.createElement("form");
    form.className = "relabel";
    form.innerHTML = `Relabel steps <input name="start" type="number" min="0" value="0"> to
      <input name="stop" type="number" min="1" value="${e.length}"> as <select name="kind">
      ${["progress", "idle", "failure_inducing", "recovery"].map((k) => `<option>${k}</option>`).join("")}</select>
      <button type="submit">Save label</button>`;
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const data = new FormData(form);
      try {
        await api(`/api/episodes/${e.id}/segments`,
          { start: Number(data.get("start")), stop: Number(data.get("stop")), kind: data.get("kind") });
        notice(`episode ${e.id}: label saved`);
        showEpisode(e.id);
      } catch (error) { notice(`relabel: ${error.message}`); }
    });
    view.append(form);
  }
  const legend = document.createElement("div");
  legend.className = "legend";
  for (const kind of [...new Set(e.segments.map((s) => s.kind))]) {
    legend.insertAdjacentHTML("beforeend", `<span><i class="kind-${kind}"></i>${kind.replaceAll("_", " ")}</span>`);
  }
  for (const actor of [...new Set(e.actor)]) {
    legend.insertAdjacentHTML("beforeend", `<span><i class="actor-${actor}"></i>chosen by ${actor}</span>`);
  }
  view.append(legend);
}

async function start() {
  try {
    me = { ...(await api("/api/me")), csrf: sessionStorage.getItem("csrf") };
  } catch {
    $("#login").hidden = false;
    return;
  }
  $("#login").hidden = true;
  $("#app").hidden = false;
  $("#who").textContent = `${me.user} (${me.role})`;
  connect();
  showPage((location.hash || "#fleet").slice(1));
}

$("#login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = new FormData(event.target);
  try {
    const session = await api("/api/login", { username: form.get("username"), password: form.get("password") });
    sessionStorage.setItem("csrf", session.csrf);
    await start();
  } catch (error) {
    $("#login-error").textContent = error.message;
  }
});
$("#estop-all").addEventListener("click", () => act("all", "estop"));
$("#rewind-steps").addEventListener("input", (e) => {
  const seconds = fleet ? ` (${(e.target.value * fleet.control_dt).toFixed(1)} s)` : "";
  $("#rewind-value").textContent = `${e.target.value}${seconds}`;
});
// where a rewind would land, rendered beside the robot (which does not move) while the slider is dragged
let previewTimer = null;
let previewUrl = null;
function previewRewind(steps) {
  clearTimeout(previewTimer);
  previewTimer = setTimeout(async () => {
    if (!held) return;
    const query = steps === null ? "" : `?steps=${steps}`;
    const response = await fetch(`/api/robots/${encodeURIComponent(held)}/rewind_preview${query}`);
    if (!response.ok) { notice(`preview: ${(await response.json().catch(() => ({}))).error || response.status}`); return; }
    if (previewUrl) URL.revokeObjectURL(previewUrl);
    previewUrl = URL.createObjectURL(await response.blob());
    const img = $("#rewind-preview");
    img.src = previewUrl;
    img.hidden = false;
    $("#rewind-preview-caption").textContent = steps === null
      ? "where Rewind to in-distribution lands" : `${steps} steps back, where Rewind lands`;
  }, 120);
}
$("#rewind-steps").addEventListener("input", (e) => previewRewind(Number(e.target.value)));
$("#rewind-best").addEventListener("mouseenter", () => previewRewind(null));
$("#rewind").addEventListener("click", () => {
  $("#rewind-preview").hidden = true;
  $("#rewind-preview-caption").textContent = "";
  if (held) act(held, "rewind", { steps: Number($("#rewind-steps").value) });
});
$("#rewind-best").addEventListener("click", () => held && act(held, "rewind", { steps: null }));
$("#release").addEventListener("click", () => held && act(held, "release"));
$("#correction-done").addEventListener("click", () => held && act(held, "release", { correction_done: true }));
$("#episode-filter").addEventListener("submit", (event) => { event.preventDefault(); loadEpisodes(); });
for (const link of document.querySelectorAll("nav a")) link.addEventListener("click", () => showPage(link.dataset.page));
start();
