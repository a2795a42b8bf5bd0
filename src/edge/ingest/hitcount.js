(function (d, w) {
  var s = d.currentScript, u = new URL("/api/v1/hits", (s && s.src) || location.href).href;
  function send() {
    var p = w.performance, n = p && p.getEntriesByType && p.getEntriesByType("navigation")[0],
      h = { name: PREFIX + location.pathname };
    if (n && n.loadEventEnd > 0) h.value = Math.round(n.loadEventEnd - n.startTime);
    var b = JSON.stringify(h);
    navigator.sendBeacon ? navigator.sendBeacon(u, b) : fetch(u, { method: "POST", body: b, keepalive: true });
  }
  d.readyState == "complete" ? setTimeout(send, 0) : w.addEventListener("load", function () { setTimeout(send, 0); });
})(document, window);
