// Typesets the math of every page with the KaTeX copy in docs/vendor/katex (no network needed).
// pymdownx.arithmatex (generic mode) wraps inline math as \( ... \) and display math as
// \[ ... \] in elements of class "arithmatex"; only those elements are rendered.
// Material's instant navigation swaps page bodies without reloading: document$ fires each time.
(function () {
  function render(root) {
    root.querySelectorAll(".arithmatex").forEach(function (el) {
      renderMathInElement(el, {
        delimiters: [
          { left: "\\(", right: "\\)", display: false },
          { left: "\\[", right: "\\]", display: true }
        ],
        throwOnError: false
      });
    });
  }
  if (typeof document$ !== "undefined") {
    document$.subscribe(function () { render(document.body); });
  } else {
    document.addEventListener("DOMContentLoaded", function () { render(document.body); });
  }
})();
