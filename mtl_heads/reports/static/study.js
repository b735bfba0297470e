document.querySelectorAll(".tabs").forEach(function (tabs) {
  var panes = tabs.parentNode.querySelectorAll(":scope > .pane");
  tabs.querySelectorAll("button").forEach(function (b, i) {
    b.addEventListener("click", function () {
      tabs.querySelectorAll("button").forEach(function (x) { x.classList.toggle("on", x === b); });
      panes.forEach(function (p, j) { p.hidden = j !== i; });
    });
  });
});
