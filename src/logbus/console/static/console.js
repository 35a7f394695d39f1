// Live refresh: every few seconds fetch this page again and swap in its [data-fragment] parts
// (charts and tables). Without scripts the page is complete as served; this only keeps it current.
(function () {
  "use strict";
  const period = Number(document.body.dataset.refreshMs) || 5000;
  if (!document.querySelector("[data-fragment]")) return;

  async function refresh() {
    try {
      const response = await fetch(window.location.href, { headers: { "Accept": "text/html" } });
      if (!response.ok) return;
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      for (const fresh of page.querySelectorAll("[data-fragment]")) {
        const current = document.getElementById(fresh.id);
        if (current) current.replaceChildren(...fresh.childNodes);
      }
      document.body.dataset.refreshedAt = String(Date.now());
    } catch (error) {
      console.warn("logbus console: refresh failed", error);
    }
  }

  window.setInterval(refresh, period);
})();
