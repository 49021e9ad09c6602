"""A message's HTML part made safe to show: sanitized by nh3 (the Ammonia sanitizer), remote images held back.

What is kept is markup and a few presentational attributes and style properties: no script, no style sheet, no
form, no frame, no event handler, no `javascript:` link. Remote images (http, https, protocol-relative) lose
their address unless the person asked for them, since fetching one tells the sender the mail was opened; images
of any other kind (cid:, data:) are dropped, as Oaken does not serve them. The console shows the result in a
sandboxed frame whose own policy runs no script either (apps.console.views.message_html).
"""

from __future__ import annotations

from dataclasses import dataclass

import nh3

_TAGS = set(nh3.ALLOWED_TAGS) | {"font", "tfoot"}
_ATTRIBUTES: dict[str, set[str]] = {tag: set(names) for tag, names in nh3.ALLOWED_ATTRIBUTES.items()}
for _tag in ("table", "td", "th", "tr", "tbody", "thead", "tfoot", "div", "p", "span", "img", "font", "center"):
    _ATTRIBUTES.setdefault(_tag, set()).update({"style", "width", "height", "align", "valign", "bgcolor"})
_ATTRIBUTES["*"] = {"style", "dir", "lang", "title"}
_ATTRIBUTES["font"] |= {"color", "face", "size"}
_ATTRIBUTES["table"] |= {"border", "cellpadding", "cellspacing"}
# style properties that draw text and boxes; none of them can name a URL (no background, no background-image)
_STYLE = {
    "color", "background-color", "font", "font-family", "font-size", "font-style", "font-weight", "line-height",
    "text-align", "text-decoration", "text-transform", "letter-spacing", "vertical-align", "white-space",
    "margin", "margin-top", "margin-right", "margin-bottom", "margin-left",
    "padding", "padding-top", "padding-right", "padding-bottom", "padding-left",
    "border", "border-top", "border-right", "border-bottom", "border-left", "border-color", "border-style",
    "border-width", "border-collapse", "border-radius", "width", "max-width", "min-width", "height", "display",
}  # fmt: skip
_REMOTE = ("http://", "https://", "//")


@dataclass(frozen=True)
class SafeHtml:
    html: str
    remote_images: int  # remote images in the part (held back unless they were asked for)


def sanitize(html: str, *, remote_images: bool = False) -> SafeHtml:
    """The HTML part, safe to show in a sandboxed frame; remote images only when `remote_images`."""
    found = 0

    def keep(tag: str, attribute: str, value: str) -> str | None:
        nonlocal found
        if tag == "img" and attribute == "src":
            if not value.strip().lower().startswith(_REMOTE):
                return None
            found += 1
            return value if remote_images else None
        return value

    clean = nh3.clean(
        html,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        attribute_filter=keep,
        url_schemes={"http", "https", "mailto"},
        filter_style_properties=_STYLE,
        link_rel="noopener noreferrer nofollow",
        set_tag_attribute_values={"a": {"target": "_blank"}},
        strip_comments=True,
    )
    return SafeHtml(clean, found)
