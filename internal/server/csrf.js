// prq: same-origin requests of the asynq web UI carry X-PRQ-CSRF, which
// prq requires on every state-changing request and which a page on
// another origin cannot send (a form cannot set headers; fetch from
// another origin needs a CORS preflight that prq never grants).
(function () {
  "use strict";
  var header = "X-PRQ-CSRF";
  function sameOrigin(url) {
    try { return new URL(url, window.location.href).origin === window.location.origin; } catch (e) { return false; }
  }
  var open = XMLHttpRequest.prototype.open;
  XMLHttpRequest.prototype.open = function (method, url) {
    var r = open.apply(this, arguments);
    if (sameOrigin(url)) { this.setRequestHeader(header, "1"); }
    return r;
  };
  if (window.fetch) {
    var f = window.fetch;
    window.fetch = function (input, init) {
      var url = typeof input === "string" ? input : (input && input.url) || String(input);
      if (!sameOrigin(url)) { return f.apply(this, arguments); }
      init = Object.assign({}, init || {});
      var h = new Headers(init.headers || (typeof input !== "string" && input.headers) || {});
      h.set(header, "1");
      init.headers = h;
      return f.call(this, input, init);
    };
  }
})();
