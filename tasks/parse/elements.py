"""unstructured's elements → blocks with heading paths; the HTML, Markdown and text partitioners
as used by every reader that hands unstructured text.

Headings become a section path that every following block carries until a heading of the same
or a higher level.
"""

from __future__ import annotations

import threading
from typing import Any, Literal

from tasks.core.records import Block

# Element categories that are not document text.
SKIPPED_CATEGORIES = {"Image", "PageBreak", "Header", "Footer", "PageNumber"}

# unstructured's documented switch for "no language detection": the index does not use the
# detected language, and detecting it cost a third of a Markdown file's parsing time.
NO_LANGUAGE_DETECTION = [""]

# HTML that is page chrome, not content (Sphinx's "¶" heading anchors included); removed
# before partitioning.
_HTML_CHROME_XPATH = (
    "//script | //style | //noscript | //template | //nav | //*[@role='navigation']"
    " | //a[contains(concat(' ', @class, ' '), ' headerlink ')]"
)

Markup = Literal["html", "md", "txt"]

# The Markdown extensions unstructured's partition_md converts with (its default; the blocks
# are the same: tests/test_load.py).
MARKDOWN_EXTENSIONS = ["tables", "fenced_code"]
_converters = threading.local()  # one kept Markdown converter per thread


def strip_html_chrome(html: str) -> str:
    """Drop scripts, styles and navigation blocks so only page content is partitioned."""
    import lxml.html

    try:
        tree = lxml.html.document_fromstring(html)
    except (ValueError, lxml.etree.ParserError):
        return html
    for node in tree.xpath(_HTML_CHROME_XPATH):
        node.drop_tree()
    return lxml.html.tostring(tree, encoding="unicode")


def text_blocks(text: str, markup: Markup) -> list[Block]:
    """The blocks of decoded HTML (page chrome dropped), Markdown or plain text."""
    if markup == "html":
        from unstructured.partition.html import partition_html

        elements = partition_html(text=strip_html_chrome(text), languages=NO_LANGUAGE_DETECTION)
    elif markup == "md":
        from unstructured.partition.html import partition_html

        # partition_md's steps, with a kept converter: it built one per file (its extensions'
        # patterns), about a sixth of a small note's parsing.
        html = markdown_html(text)
        elements = partition_html(text=html, languages=NO_LANGUAGE_DETECTION) if html else []
    else:
        from unstructured.partition.text import partition_text

        elements = partition_text(text=text, languages=NO_LANGUAGE_DETECTION)
    return elements_to_blocks(elements)


def markdown_html(text: str) -> str:
    """Markdown text as HTML, as unstructured's partition_md converts it."""
    converter = getattr(_converters, "markdown", None)
    if converter is None:
        import markdown

        converter = _converters.markdown = markdown.Markdown(extensions=MARKDOWN_EXTENSIONS)
    return str(converter.reset().convert(text))


def elements_to_blocks(elements: list[Any]) -> list[Block]:
    """Blocks with heading path, heading level and page number from unstructured elements.

    Markdown and HTML headings arrive as Title elements with `category_depth` (0 for h1);
    PDF Titles are guesses from font heuristics and carry no depth, so they stay plain text.
    Navigation (`navigation`: tables of contents, link lists) is left out.
    """
    headings: list[tuple[int, str]] = []  # (level, text), outermost first
    blocks: list[Block] = []
    skipped = navigation(elements)
    for at, element in enumerate(elements):
        text = (element.text or "").strip()
        if not text or element.category in SKIPPED_CATEGORIES or at in skipped:
            continue
        depth = element.metadata.category_depth
        if element.category == "Title" and depth is not None:
            level = depth + 1
            headings = [h for h in headings if h[0] < level] + [(level, " ".join(text.split()))]
        blocks.append(
            Block(
                text=text,
                section=" > ".join(h[1] for h in headings),
                heading_level=headings[-1][0] if headings else 0,
                page_number=element.metadata.page_number,
            )
        )
    return blocks


# A run of at least this many elements, each one link or a short text, at least half and at
# least two of them links, is navigation: a table of contents with its label ("Table of
# Contents", "目录"), a previous/home/next bar ("上一页 | Debian 管理员手册 | 下一页").
NAVIGATION_RUN = 3
NAVIGATION_LABEL_CHARS = 24  # a short text beside links: a label, a page's name in a bar


def navigation(elements: list[Any]) -> set[int]:
    """The positions of the elements that are navigation rather than text: runs of
    NAVIGATION_RUN or more elements that are each one link (their whole text is link text)
    or a short untitled text, at least half of them and at least two links. None where
    that would leave no text: a page that is only a list of links is its own content."""
    found: set[int] = set()
    run: list[int] = []
    links = 0
    for at, element in enumerate([*elements, None]):
        link = element is not None and _is_link(element)
        if element is not None and (link or _is_label(element)):
            run.append(at)
            links += link
            continue
        if len(run) >= NAVIGATION_RUN and links >= 2 and 2 * links >= len(run):
            found.update(run)
        run, links = [], 0
    text = [at for at, element in enumerate(elements) if (element.text or "").strip()]
    return found if any(at not in found for at in text) else set()


def _is_link(element: Any) -> bool:
    """Whether the element's whole text is the text of its links."""
    text = " ".join((element.text or "").split())
    links = " ".join(" ".join(getattr(element.metadata, "link_texts", None) or ()).split())
    return bool(text) and text == links


def _is_label(element: Any) -> bool:
    text = (element.text or "").strip()
    return element.category != "Title" and 0 < len(text) <= NAVIGATION_LABEL_CHARS
