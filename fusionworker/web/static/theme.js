// Applied before the page paints: the theme the user chose with the header's toggle
// (kept in localStorage), else the system's (prefers-color-scheme, in app.css).
(function () {
  "use strict";
  try {
    var chosen = window.localStorage.getItem("fw-theme");
    if (chosen === "dark" || chosen === "light") document.documentElement.setAttribute("data-theme", chosen);
  } catch (e) { /* storage refused: follow the system */ }
})();
