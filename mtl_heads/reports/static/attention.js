(function () {
  var root = document.getElementById("attention");
  var data = JSON.parse(document.getElementById("att-data").textContent);
  var state = {sentence: 0, head: data.heads[0]};
  var W = 430, ROW = 18, TOP = 20, XL = 150, XR = 280, MAX = 20;
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) { return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]; });
  }
  function cut(s) { s = String(s); return s.length > MAX ? s.slice(0, MAX - 1) + "\u2026" : s; }
  function name(key) { var p = key.split("."); return "L" + p[0] + "H" + p[1]; }
  function noteText(x) {  // as note_text in Python
    return x.report + ": " + x.probe + " " + x.label + " " + x.score + (x.n == null ? "" : " (n=" + x.n + ")");
  }
  function draw(box, msg, panel) {
    var s = panel.sentences[state.sentence];
    box.innerHTML = "";
    if (!s) { msg.textContent = "this report did not sample this sentence"; return; }
    var rows = s.rows[state.head];
    if (!rows) { msg.textContent = name(state.head) + ": not in this report's model"; return; }
    var n = s.tokens.length, height = TOP + 8 + n * ROW, arcs = [], count = 0;
    var words = ['<text class="att-special" x="' + XL + '" y="12" text-anchor="end">attends from</text>',
                 '<text class="att-special" x="' + XR + '" y="12">to</text>'];
    function y(i) { return TOP + i * ROW + ROW / 2; }
    function special(i) { return i < s.first_word || i >= s.first_word + s.words; }
    for (var q = 0; q < rows.length; q++) {
      for (var j = 0; j + 1 < rows[q].length; j += 2) {
        var t = rows[q][j], w = rows[q][j + 1] / panel.unit, mid = (XL + XR) / 2 + 3;
        arcs.push('<path data-from="' + q + '" data-to="' + t + '" data-weight="' + w + '" d="M' + (XL + 6) + " " + y(q)
          + " C" + mid + " " + y(q) + " " + mid + " " + y(t) + " " + (XR - 6) + " " + y(t) + '" stroke="'
          + (special(t) ? "#999" : "#1f6fb4") + '" stroke-width="' + (0.5 + 4 * w).toFixed(2) + '" stroke-opacity="'
          + (0.15 + 0.85 * w).toFixed(2) + '"><title>' + esc(s.tokens[q]) + " \u2192 " + esc(s.tokens[t]) + ": "
          + w.toFixed(3) + "</title></path>");
        count++;
      }
    }
    for (var i = 0; i < n; i++) {
      var cls = special(i) ? ' class="att-special"' : "";
      words.push('<text' + cls + ' data-q="' + i + '" x="' + XL + '" y="' + (y(i) + 4) + '" text-anchor="end">'
        + esc(cut(s.tokens[i])) + "<title>" + esc(s.tokens[i]) + "</title></text>");
      words.push('<text' + cls + ' x="' + XR + '" y="' + (y(i) + 4) + '">' + esc(cut(s.tokens[i])) + "</text>");
    }
    msg.textContent = count ? "" : "no weight of this head reaches the threshold";
    box.innerHTML = '<svg class="att-arcs" width="' + W + '" height="' + height + '" viewBox="0 0 ' + W + " " + height
      + '" role="img" aria-label="' + esc(panel.label + ", " + name(state.head)) + '">' + arcs.join("") + words.join("")
      + "</svg>";
    var svg = box.firstChild;
    svg.querySelectorAll("text[data-q]").forEach(function (text) {
      text.addEventListener("mouseenter", function () {
        svg.classList.add("att-focus");
        svg.querySelectorAll('path[data-from="' + text.getAttribute("data-q") + '"]').forEach(function (p) {
          p.classList.add("att-on");
        });
      });
      text.addEventListener("mouseleave", function () {
        svg.classList.remove("att-focus");
        svg.querySelectorAll("path.att-on").forEach(function (p) { p.classList.remove("att-on"); });
      });
    });
  }
  function render() {
    root.querySelectorAll("[data-head]").forEach(function (b) {
      b.classList.toggle("att-sel", b.getAttribute("data-head") === state.head);
    });
    var groups = data.groups.filter(function (g) { return g.heads.indexOf(state.head) >= 0; })
      .map(function (g) { return g.name; });
    document.getElementById("att-head-info").textContent = name(state.head) + (groups.length ? ": " + groups.join(", ") : "")
      + (data.notes[state.head] && data.notes[state.head].length
         ? "\n" + data.notes[state.head].map(noteText).join("\n") : "");
    data.panels.forEach(function (panel, i) {
      var el = document.getElementById("att-panel-" + i);
      draw(el.querySelector(".att-svg"), el.querySelector(".att-msg"), panel);
    });
  }
  root.querySelectorAll("button[data-head]").forEach(function (b) {
    b.addEventListener("click", function () { state.head = b.getAttribute("data-head"); render(); });
  });
  document.getElementById("att-sentence").addEventListener("change", function (e) {
    state.sentence = +e.target.value; render();
  });
  render();
})();
