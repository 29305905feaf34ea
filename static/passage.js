// A passage's page, opened from a citation: the quoted words are marked (<mark class="quoted">)
// and, when they are out of sight on arrival (below a phone's fold, or a long passage's), the
// page brings them into view with a few lines above them to read them in. A page without a
// mark does not move, nor one reloaded or returned to (the browser keeps the analyst's place).
// Smooth, unless the analyst asked for reduced motion.

function arrivedAfresh() {
  const [navigation] = performance.getEntriesByType("navigation");
  return !navigation || navigation.type === "navigate";
}

function showQuote() {
  const mark = document.querySelector("#passage mark.quoted");
  if (!mark || !arrivedAfresh() || window.scrollY !== 0) return;
  const box = mark.getBoundingClientRect();
  const height = window.innerHeight;
  if (box.top >= 0 && box.bottom <= height) return; // in view already
  // Above it, a quarter of the screen of what leads into it; less when the quote is tall.
  const above = Math.max(16, Math.min(height / 4, (height - box.height) / 2));
  const reduce = window.matchMedia("(prefers-reduced-motion: reduce)").matches;
  window.scrollTo({ top: box.top - above, behavior: reduce ? "auto" : "smooth" });
}

showQuote();
