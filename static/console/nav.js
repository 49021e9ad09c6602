// The console's navigation, on every page of a signed-in person: picking another tenant in the
// switcher switches to it at once (the form's button does the same without a script).

for (const select of document.querySelectorAll("select[data-autosubmit]")) {
  select.addEventListener("change", () => select.form.submit());
}

// On a phone the navigation is one row that scrolls sideways: bring the current page's link into it.
const scroller = document.querySelector(".console-nav .nav-groups");
const here = scroller && scroller.querySelector('[aria-current="page"]');
if (here && scroller.scrollWidth > scroller.clientWidth) {
  scroller.scrollLeft = Math.max(0, here.offsetLeft - scroller.offsetLeft - 16);
}
