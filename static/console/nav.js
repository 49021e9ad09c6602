// The console's navigation, on every page of a signed-in person: picking another tenant in the
// switcher switches to it at once (the form's button does the same without a script).

for (const select of document.querySelectorAll("select[data-autosubmit]")) {
  select.addEventListener("change", () => select.form.submit());
}
