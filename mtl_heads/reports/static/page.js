function drawHeatmap(t) {  /* the cells of a heatmap from its data-heat (page.py heatmap_spec, heat_cells) */
  var s = JSON.parse(t.getAttribute("data-heat")), L = s.shape[0], H = s.shape[1], span = (s.hi - s.lo) || 1;
  var html = "<tr><th></th>";
  for (var h = 0; h < H; h++) html += "<th>" + h + "</th>";
  html += "</tr>";
  for (var l = 0; l < L; l++) {
    html += "<tr><th>" + l + "</th>";
    for (h = 0; h < H; h++) {
      var i = l * H + h, v = s.v[i], at = "L" + l + "H" + h + " " + s.name, title, style, cls = "";
      if (v === null) { title = at + ": no value"; style = "#eee"; }
      else {
        title = at + ": " + v.toFixed(s.digits) + (s.unit === "%" ? "%" : "");
        if (s.n && s.n[i] !== null) title += " (n=" + s.n[i] + ")";
        var f = Math.min(Math.max((v - s.lo) / span, 0), 1);
        style = VIRIDIS[Math.round(f * (VIRIDIS.length - 1))];
        if (s.mark.indexOf(i) >= 0) cls = s.kind;
      }
      html += "<td" + (cls ? ' class="' + cls + '"' : "") + ' style="background:' + style + '" title="'
        + title.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;") + '"'
        + (v === null ? "" : ' data-value="' + v + '"') + "></td>";
    }
    html += "</tr>";
  }
  t.innerHTML = html;
}
document.querySelectorAll("table.heatmap[data-heat]").forEach(drawHeatmap);
document.querySelectorAll("input.filter").forEach(function (box) {  /* rows holding every word typed */
  var table = document.getElementById(box.getAttribute("data-table"));
  box.addEventListener("input", function () {
    var words = box.value.toLowerCase().split(/\s+/).filter(Boolean);
    Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
      var text = r.textContent.toLowerCase();
      r.hidden = !words.every(function (w) { return text.indexOf(w) >= 0; });
    });
  });
});
function cellValue(row, col) {
  var cell = row.cells[col];
  if (!cell) return "";
  return cell.hasAttribute("data-value") ? cell.getAttribute("data-value") : cell.textContent.trim();
}
function sortBy(th) {
  var table = th.closest("table"), body = table.tBodies[0];
  var col = Array.prototype.indexOf.call(th.parentNode.children, th);
  var rows = Array.prototype.slice.call(body.rows);
  var up = th.getAttribute("aria-sort") !== "ascending";
  var numeric = rows.every(function (r) { var v = cellValue(r, col); return v === "" || isFinite(Number(v)); });
  rows.sort(function (a, b) {
    var x = cellValue(a, col), y = cellValue(b, col);
    if (x === "" || y === "") return (x === "") - (y === "");  /* blanks last either way */
    var d = numeric ? Number(x) - Number(y) : x.localeCompare(y, undefined, {numeric: true});
    return up ? d : -d;
  });
  th.parentNode.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
  th.setAttribute("aria-sort", up ? "ascending" : "descending");
  rows.forEach(function (r) { body.appendChild(r); });
}
document.querySelectorAll("table.sortable thead th").forEach(function (th) {
  th.title = "click to sort";
  th.addEventListener("click", function () { sortBy(th); });
});
document.querySelectorAll("table.heatmap").forEach(function (t) {
  var out = t.parentNode.querySelector(".readout");
  t.addEventListener("mouseover", function (e) {
    var cell = e.target.closest("td[title]");
    if (cell && out) out.textContent = cell.title;
  });
});
