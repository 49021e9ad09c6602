// A form built from a JSON Schema (a plugin's settings schema, as list_plugins gives it), and the value it says.
//
// Each place of the schema becomes what a person can edit: a checkbox, a list of choices, a number, a text, a
// secret (format "password" or writeOnly: a password input, empty, that keeps the stored secret when left
// empty), a nested object as a fieldset of its fields (an optional one behind a "Set it" checkbox), a list of
// such scalars as rows to add and remove, a list of objects as repeated fieldsets. Anything else (a dict of
// free keys, a list of lists, a choice between shapes) is edited as JSON in a text box, its secrets shown as the
// mask. Labels and hints are the schema's titles and descriptions (plain text: Oaken reduced them), set as text.
//
// A secret left empty is sent as the mask: "********" where it was shown, or "********@<JSON pointer>" once a
// row above it was removed (set_plugin_settings keeps the stored secret it names). A value the form cannot
// read (a number that is not one, JSON that does not parse) is said beside its field, never echoed.
import { el } from "./lib.js";

export const MASK = "********";

// A value this form could not read: where (its path), and what to say.
export class FormProblem extends Error {
  constructor(path, sentence) {
    super(sentence);
    this.path = path;
  }
}

const words = (name) => String(name).replace(/_/g, " ");
const capital = (text) => text.charAt(0).toUpperCase() + text.slice(1);
const labelOf = (name, spec) => spec.title || capital(words(name));
const pointerOf = (path) => path.map((p) => "/" + String(p).replace(/~/g, "~0").replace(/\//g, "~1")).join("");
const isSecret = (spec) => spec.format === "password" || spec.writeOnly === true;
const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);

function follow(root, ref) {
  if (typeof ref !== "string" || !ref.startsWith("#")) return null;
  let node = root;
  for (const token of ref.slice(1).split("/").slice(1)) {
    const key = token.replace(/~1/g, "/").replace(/~0/g, "~");
    if (!isObject(node) || !(key in node)) return null;
    node = node[key];
  }
  return isObject(node) ? node : null;
}

// The schema one place meets: a "$ref" followed (the place's own title, description and default kept over the
// definition's), an optional value's one other branch taken (nullable). `unknown` when it cannot be read.
function resolved(root, spec, depth = 0) {
  if (!isObject(spec) || depth > 12) return { spec: {}, nullable: false, unknown: true };
  if (typeof spec.$ref === "string") {
    const target = follow(root, spec.$ref);
    if (!target) return { spec: {}, nullable: false, unknown: true };
    const { $ref: _ref, ...own } = spec;
    const inner = resolved(root, target, depth + 1);
    return { ...inner, spec: { ...inner.spec, ...own } };
  }
  if (Array.isArray(spec.allOf) && spec.allOf.length === 1) {
    // how some generators put words beside a reference: {"allOf": [{"$ref": ...}], "description": ...}
    const { allOf, ...own } = spec;
    const inner = resolved(root, allOf[0], depth + 1);
    return { ...inner, spec: { ...inner.spec, ...own } };
  }
  const branches = spec.anyOf || spec.oneOf;
  if (Array.isArray(branches)) {
    const others = branches.filter((b) => !(isObject(b) && b.type === "null"));
    const { anyOf: _a, oneOf: _o, ...own } = spec;
    if (others.length === 1) {
      const inner = resolved(root, others[0], depth + 1);
      return { ...inner, spec: { ...inner.spec, ...own }, nullable: inner.nullable || others.length < branches.length };
    }
    const secret = others.map((b) => resolved(root, b, depth + 1).spec).find(isSecret);
    if (secret) return { spec: { ...secret, ...own }, nullable: others.length < branches.length };
    return { spec, nullable: false, unknown: true };
  }
  if (Array.isArray(spec.type)) {
    const others = spec.type.filter((t) => t !== "null");
    if (others.length === 1) return { spec: { ...spec, type: others[0] }, nullable: others.length < spec.type.length };
    return { spec, nullable: false, unknown: true };
  }
  return { spec, nullable: false };
}

// What kind of input a place gets.
function kindOf(root, place) {
  const { spec } = place;
  if (place.unknown) return "json";
  if (isSecret(spec)) return spec.type === "string" || spec.type === undefined ? "secret" : "json";
  if (spec.type === "boolean") return "boolean";
  if (Array.isArray(spec.enum) && spec.enum.length && spec.enum.every((v) => ["string", "number"].includes(typeof v))) return "choice";
  if (spec.type === "integer" || spec.type === "number") return "number";
  if (spec.type === "string") return "text";
  if ((spec.type === "object" || spec.properties) && isObject(spec.properties) && !spec.patternProperties && !isObject(spec.additionalProperties)) {
    return "object";
  }
  if (spec.type === "array" && isObject(spec.items) && !spec.prefixItems) {
    const item = resolved(root, spec.items);
    const kind = kindOf(root, item);
    if (["secret", "choice", "number", "text"].includes(kind) && !item.nullable) return "list";
    if (kind === "object" && !item.nullable) return "objects";
  }
  return "json";
}

// ------------------------------------------------------------ building

// The form's shared state: where each field is (for its problem), and unique ids.
export class SchemaForm {
  constructor(prefix, schema) {
    this.prefix = prefix; // every id starts with it
    this.root = schema;
    this.places = new Map(); // "a.b.0" -> {problem, input, said}, filled as the form is read
    this.rows = 0;
  }

  // The fields of the schema's top object, with the values given (masked secrets included).
  fields(values) {
    const properties = isObject(this.root.properties) ? this.root.properties : {};
    return Object.entries(properties).map(([name, spec]) =>
      this.field({ name, spec, value: values ? values[name] : undefined, path: [name], idPath: [name] }),
    );
  }

  // The settings the form says now (a FormProblem when one cannot be read).
  read() {
    this.places.clear();
    const values = {};
    for (const f of this.built) {
      const value = f.read([f.name]);
      if (value !== undefined) values[f.name] = value;
    }
    return values;
  }

  build(values) {
    this.built = this.fields(values);
    return this.built.map((f) => f.node);
  }

  // Where a refusal for this path (["servers", 1, "password"]) is said: the nearest field that was read.
  placeFor(path) {
    for (let end = path.length; end > 0; end -= 1) {
      const found = this.places.get(path.slice(0, end).join("."));
      if (found) return found;
    }
    return null;
  }

  clearProblems(form) {
    form.querySelectorAll(".problem").forEach((p) => {
      p.hidden = true;
      p.textContent = "";
    });
  }

  say(path, sentence) {
    const place = this.placeFor(path);
    if (!place) return null;
    place.problem.textContent = sentence;
    place.problem.hidden = false;
    return place;
  }

  register(path, problem, input, said) {
    this.places.set(path.join("."), { problem, input, said });
  }

  id(idPath) {
    return `${this.prefix}-${idPath.join("-")}`;
  }

  field({ name, spec: raw, value, path, idPath, context, inRow }) {
    const place = resolved(this.root, raw);
    const { spec } = place;
    const kind = kindOf(this.root, place);
    const label = inRow ? inRow.label : labelOf(name, spec);
    // what a refusal calls it, said when it is read (a row's number changes as rows above it are removed)
    const said = () => (inRow ? inRow.label : context ? `${label} (${context()})` : label);
    const shown = value === undefined ? spec.default : value;
    const make = { object: this.objectField, list: this.listField, objects: this.listField, json: this.jsonField }[kind] || this.scalarField;
    const built = make.call(this, { name, spec, place, kind, label, said, value: shown, path, idPath, inRow });
    return { name, ...built };
  }

  problemFor(id) {
    return el("span", { class: "errors problem", id: `${id}--problem`, hidden: "" });
  }

  hintFor(id, text) {
    return el("span", { class: "hint", id: `${id}--hint` }, text || "");
  }

  // A checkbox, a list of choices, a number, a secret or a text.
  scalarField({ spec, place, kind, label, said, value, path, idPath, inRow }) {
    const id = this.id(idPath);
    const described = inRow ? `${id}--problem` : `${id}--hint ${id}--problem`;
    const attrs = { id, name: path.join("."), "aria-describedby": described };
    if (inRow) attrs["aria-label"] = label;
    let input;
    let kept = ""; // a secret's place when it was shown set: what it keeps when left empty
    let choices = [];
    if (kind === "boolean") {
      input = el("input", { ...attrs, type: "checkbox" });
      input.checked = Boolean(value);
    } else if (kind === "choice") {
      choices = place.nullable ? [null, ...spec.enum] : spec.enum;
      input = el("select", attrs, choices.map((v, i) => el("option", { value: String(i) }, v === null ? "—" : String(v))));
      const at = choices.findIndex((v) => v === (value === undefined ? (place.nullable ? null : spec.enum[0]) : value));
      input.value = String(Math.max(0, at));
    } else if (kind === "number") {
      input = el("input", { ...attrs, type: "number", step: spec.type === "integer" ? "1" : "any" });
      if (spec.minimum !== undefined) input.min = String(spec.minimum);
      if (spec.maximum !== undefined) input.max = String(spec.maximum);
      input.value = value === undefined || value === null ? "" : String(value);
    } else if (kind === "secret") {
      input = el("input", { ...attrs, type: "password", autocomplete: "off" });
      kept = value === MASK ? pointerOf(path) : "";
      input.placeholder = kept ? "set (leave empty to keep it)" : "not set";
      input.dataset.secret = kept ? "set" : "";
    } else {
      input = el("input", { ...attrs, type: "text" });
      if (spec.maxLength !== undefined) input.maxLength = spec.maxLength;
      input.value = value === undefined || value === null ? "" : String(value);
    }
    input.dataset.kind = kind;
    const problem = this.problemFor(id);
    const read = (at) => {
      this.register(at, problem, input, said);
      if (kind === "boolean") return input.checked;
      if (kind === "choice") return choices[Number(input.value)];
      if (kind === "number") {
        if (input.validity.badInput) throw new FormProblem(at, `${said()} must be a number.`);
        if (input.value === "") return place.nullable ? null : undefined;
        return Number(input.value);
      }
      if (kind === "secret") {
        if (input.value) return input.value;
        if (kept) return pointerOf(at) === kept ? MASK : `${MASK}@${kept}`;
        return place.nullable && !inRow ? null : undefined;
      }
      if (input.value === "" && (place.nullable || inRow)) return place.nullable && !inRow ? null : undefined;
      return input.value;
    };
    if (inRow) return { node: el("span", { class: "row-input" }, input, problem), input, read };
    const hint = this.hintFor(id, spec.description);
    const node = kind === "boolean"
      ? el("p", { class: "field" }, el("label", { for: id }, input, " ", label), " ", hint, " ", problem)
      : el("p", { class: "field" }, el("label", { for: id }, label), " ", input, " ", hint, " ", problem);
    return { node, input, read };
  }

  // A nested object: a fieldset of its fields; an optional one behind a checkbox ("Set it").
  objectField({ spec, place, label, said, value, path, idPath, inRow }) {
    const id = this.id(idPath);
    const values = isObject(value) ? value : {};
    const children = Object.entries(spec.properties).map(([name, sub]) =>
      this.field({ name, spec: sub, value: values[name], path: [...path, name], idPath: [...idPath, name], context: said }),
    );
    const problem = this.problemFor(id);
    const legend = el("legend", {}, label);
    const inner = el("div", { class: "fields" }, children.map((c) => c.node));
    let toggle = null;
    if (place.nullable && !inRow) {
      toggle = el("input", { type: "checkbox", id: `${id}--set`, "aria-controls": `${id}--fields` });
      toggle.checked = isObject(value);
      inner.id = `${id}--fields`;
      inner.hidden = !toggle.checked;
      toggle.addEventListener("change", () => {
        inner.hidden = !toggle.checked;
      });
    }
    // a row's own words are the list's: what the item's model says of itself is said once, above the rows
    const node = el(
      "fieldset",
      { class: "setting-group", id, "aria-describedby": `${id}--hint ${id}--problem` },
      legend,
      el("p", { class: "group-hint" }, this.hintFor(id, inRow ? "" : spec.description), " ", problem),
      toggle ? el("label", { for: `${id}--set`, class: "check toggle" }, toggle, ` Set ${label.toLowerCase()}`) : null,
      inner,
    );
    const read = (at) => {
      this.register(at, problem, toggle || children[0]?.input || null, said);
      if (toggle && !toggle.checked) return null;
      const out = {};
      for (const child of children) {
        const v = child.read([...at, child.name]);
        if (v !== undefined) out[child.name] = v;
      }
      return out;
    };
    return { node, input: toggle || (children[0] && children[0].input), read, legend };
  }

  // A list: rows of one input each (scalars), or fieldsets (objects); a row is added or removed with a button.
  listField({ name, spec, kind, label, said, value, path, idPath }) {
    const id = this.id(idPath);
    const itemSpec = spec.items;
    const rowsBox = el(kind === "list" ? "ul" : "div", { class: kind === "list" ? "setting-rows" : "setting-objects", id: `${id}--rows` });
    const rows = [];
    const problem = this.problemFor(id);
    const add = el("button", { type: "button", class: "add-row", id: `${id}--add` }, `Add ${kind === "list" ? "a row " : ""}to ${label.toLowerCase()}`);
    const renumber = () => {
      rows.forEach((r, i) => {
        const rowLabel = `${label} ${i + 1}`;
        r.inRow.label = rowLabel;
        r.remove.setAttribute("aria-label", `Remove ${rowLabel.toLowerCase()}`);
        if (r.legend) r.legend.textContent = rowLabel;
        else r.input.setAttribute("aria-label", rowLabel);
      });
      add.disabled = Number.isInteger(spec.maxItems) && rows.length >= spec.maxItems;
    };
    const addRow = (itemValue, at) => {
      this.rows += 1;
      const rowIdPath = [...idPath, `r${this.rows}`];
      const inRow = { label: `${label} ${at + 1}` };
      const built = this.field({ name, spec: itemSpec, value: itemValue, path: [...path, at], idPath: rowIdPath, inRow });
      const remove = el("button", { type: "button", class: "remove-row" }, "Remove");
      const entry = { ...built, remove, inRow };
      remove.addEventListener("click", () => {
        const place = rows.indexOf(entry);
        rows.splice(place, 1);
        wrapper.remove();
        renumber();
        const next = rows[place] || rows[place - 1];
        (next ? next.input || next.remove : add).focus(); // never lost to the page's top
      });
      let wrapper;
      if (kind === "list") {
        wrapper = el("li", { class: "setting-row" }, built.node, remove);
      } else {
        wrapper = built.node;
        wrapper.append(remove);
      }
      rows.push(entry);
      rowsBox.append(wrapper);
      renumber();
      return entry;
    };
    (Array.isArray(value) ? value : []).forEach((item, i) => addRow(item, i));
    renumber();
    add.addEventListener("click", () => {
      const entry = addRow(undefined, rows.length);
      (entry.input || entry.remove).focus();
    });
    const node = el(
      "fieldset",
      { class: "setting-group", id, "aria-describedby": `${id}--hint ${id}--problem` },
      el("legend", {}, label),
      el("p", { class: "group-hint" }, this.hintFor(id, spec.description || resolved(this.root, itemSpec).spec.description), " ", problem),
      rowsBox,
      add,
    );
    const read = (at) => {
      this.register(at, problem, add, said);
      const items = [];
      for (const r of rows) {
        const v = r.read([...at, items.length]);
        if (v !== undefined && !(kind === "list" && v === "")) items.push(v);
      }
      return items;
    };
    return { node, input: add, read };
  }

  // Anything else, as JSON in a text box: what it holds is checked before sending, said without echoing it.
  jsonField({ spec, label, said, value, path, idPath, inRow }) {
    const id = this.id(idPath);
    const input = el("textarea", { id, name: path.join("."), rows: "4", spellcheck: "false", "aria-describedby": `${id}--hint ${id}--problem` });
    if (inRow) input.setAttribute("aria-label", label);
    input.value = value === undefined ? "" : JSON.stringify(value, null, 2);
    input.dataset.kind = "json";
    const problem = this.problemFor(id);
    const about = [spec.description, "Written as JSON. A secret shows as ********: left so, it keeps the secret stored at that same place."]
      .filter(Boolean)
      .join(" ");
    const hint = this.hintFor(id, about);
    const read = (at) => {
      this.register(at, problem, input, said);
      if (!input.value.trim()) return undefined;
      try {
        return JSON.parse(input.value);
      } catch (_) {
        throw new FormProblem(at, `${said()} is not valid JSON: check its brackets, commas and quotes.`);
      }
    };
    const node = inRow
      ? el("span", { class: "row-input" }, input, hint, problem)
      : el("p", { class: "field" }, el("label", { for: id }, label), " ", input, " ", hint, " ", problem);
    return { node, input, read };
  }
}
