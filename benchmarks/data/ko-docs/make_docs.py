"""Make docs/*.md from the Korean Debian FAQ (Debian package debian-faq-ko 11.1).

Each chosen FAQ section (one question and its answer, with its sub-sections) becomes one Markdown
file. The FAQ's chapter pages are XHTML (DocBook XSL output), so the standard library parses them.

    apt-get download debian-faq-ko          # debian-faq-ko_11.1_all.deb
    dpkg-deb -x debian-faq-ko_11.1_all.deb x
    python3 make_docs.py x/usr/share/doc/debian/FAQ/ko docs
"""

import os
import re
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/1999/xhtml}"

# FAQ section id (the anchor in the chapter page) -> file stem in docs/.
PAGES = {
    "whatisdebian": "what-is-debian",
    "linux": "what-is-linux",
    "non-linux": "hurd-and-bsd-ports",
    "difference": "why-debian",
    "pronunciation": "pronunciation",
    "updatestable": "stable-security-updates",
    "alternativebootinstaller": "installer-boot-methods",
    "s3.1.1": "new-hardware-on-stable",
    "s3.1.3": "stable-old-packages",
    "s3.1.4": "switch-back-to-stable",
    "s3.1.5": "which-distribution",
    "s3.1.7": "testing-broken-for-months",
    "s3.1.11": "switch-to-testing-unstable",
    "otherunices": "posix-compatibility",
    "non-debian-programs": "installing-non-debian-programs",
    "apps": "available-software",
    "softwareauthors": "package-authors",
    "buildenv": "build-environment",
    "no-devs": "ld-cannot-find-lib",
    "java": "java",
    "isitdebian": "check-debian-version",
    "nonenglish": "non-english-support",
    "dists": "distributions",
    "codenames": "codenames",
    "stable": "main-contrib-non-free",
    "testing": "testing-and-freeze",
    "dirtree": "archive-directories",
    "archsections": "dists-index-files",
    "source": "source-code",
    "pools": "pool-directory",
    "incoming": "incoming",
    "deb-format": "deb-format",
    "pkgstatus": "package-states",
    "dpkg": "dpkg",
    "synaptic": "synaptic",
    "tasksel": "tasksel",
    "howtocurrent": "keeping-up-to-date",
    "keepingalog": "package-log",
    "autoupdate": "automatic-updates",
    "aptcacher": "apt-cacher",
    "non-debian-kernel": "kernel-headers",
    "customkernel": "custom-kernel",
    "modules": "kernel-modules",
    "removeoldkernel": "remove-old-kernel",
    "papersize": "paper-size",
    "hardwareaccess": "device-access",
    "booting": "boot-systemd",
    "sysvinit": "sysvinit-runlevels",
    "divert": "dpkg-divert",
    "localpackages": "local-packages",
    "diverse": "update-alternatives",
    "debiandocs": "documentation",
    "s12.2.1": "mailing-lists",
    "buglogs": "bug-tracking",
    "bugreport": "reporting-bugs",
    "sellcds": "selling-cds",
    "childistro": "derivative-distribution",
    "hardening": "hardening",
}

CODE_CLASSES = {"command", "literal", "filename", "package"}


def tag(e):
    return e.tag.replace(NS, "")


def classes(e):
    return set((e.get("class") or "").split())


def norm(s):
    return re.sub(r"\s+", " ", s).strip()


def inline(e):
    """The inline text of e, with code, emphasis and bold marked as in Markdown."""
    out = [e.text or ""]
    for c in e:
        t = tag(c)
        s = inline(c)
        if t == "code" and s.strip() and "`" not in s:
            s = f"`{s.strip()}`"
        elif t == "em" and s.strip():
            s = f"*{s.strip()}*"
        elif t in ("strong", "b") and s.strip():
            s = f"**{s.strip()}**"
        elif t in ("img", "sup"):
            s = ""  # images; footnote marks (the footnotes themselves are not kept)
        elif t == "br":
            s = "\n"
        out.append(s)
        out.append(c.tail or "")
    return "".join(out)


def block(e, depth, lines):
    """Append the Markdown lines of block element e; headings h(n) become n - depth #'s."""
    t = tag(e)
    c = classes(e)
    if t == "div" and c & {"navheader", "navfooter", "toc"}:
        return
    if t == "div" and "titlepage" in c:
        for h in e.iter():
            if tag(h) in ("h1", "h2", "h3", "h4", "h5"):
                lines += ["#" * max(1, int(tag(h)[1]) - depth) + " " + norm(inline(h)), ""]
                return
        return
    if t in ("h1", "h2", "h3", "h4", "h5", "h6"):
        lines += ["#" * max(1, int(t[1]) - depth) + " " + norm(inline(e)), ""]
    elif t == "p":
        s = norm(inline(e))
        if s:
            lines += [s, ""]
    elif t == "pre":
        lines += ["```", *"".join(e.itertext()).strip("\n").split("\n"), "```", ""]
    elif t in ("ul", "ol"):
        n = 0
        for li in e:
            if tag(li) != "li":
                continue
            n += 1
            sub = []
            for ch in li:
                block(ch, depth, sub)
            if not len(li) and (li.text or "").strip():
                sub = [norm(li.text)]
            sub = [x for x in sub if x != ""]
            mark = "- " if t == "ul" else f"{n}. "
            for i, x in enumerate(sub):
                lines.append((mark if i == 0 else " " * len(mark)) + x)
        lines.append("")
    elif t == "dl":
        for ch in e:
            if tag(ch) == "dt":
                lines.append("- **" + norm(inline(ch)) + "**")
            elif tag(ch) == "dd":
                sub = []
                for x in ch:
                    block(x, depth, sub)
                lines += ["  " + x for x in sub if x]
        lines.append("")
    elif t == "table":
        for tr in e.iter(NS + "tr"):
            cells = [norm(inline(td)) for td in tr if tag(td) in ("td", "th")]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    elif (e.text or "").strip() and t not in ("div", "body", "html"):
        lines += [norm(inline(e)), ""]
    else:
        for ch in e:
            block(ch, depth, lines)


def to_markdown(section, level):
    lines = []
    block(section, level - 1, lines)
    out, in_code = [], False
    for line in lines:
        if line.startswith("```") or line.strip().startswith("```"):
            in_code = not in_code
        elif not in_code:
            line = re.sub(r"\[\d+\]", "", line).rstrip()  # footnote marks
            if not line.strip() and line:
                line = ""
        out.append(line)
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def sections(src):
    """Yield (id, heading level, section element) for every FAQ section in the chapter pages."""
    for name in sorted(os.listdir(src)):
        if not name.endswith(".html") or name.startswith("index"):
            continue
        root = ET.parse(os.path.join(src, name)).getroot()
        for d in root.iter(NS + "div"):
            if "section" in classes(d):
                h = next(x for x in d.iter() if tag(x) in ("h2", "h3", "h4"))
                anchor = next(h.iter(NS + "a"))
                yield anchor.get("id"), int(tag(h)[1]), d


def main(src, dst):
    os.makedirs(dst, exist_ok=True)
    done = set()
    for sid, level, d in sections(src):
        if sid in PAGES:
            with open(os.path.join(dst, PAGES[sid] + ".md"), "w", encoding="utf-8") as f:
                f.write(to_markdown(d, level))
            done.add(sid)
    missing = set(PAGES) - done
    if missing:
        sys.exit(f"sections not found: {sorted(missing)}")
    print(f"{len(done)} pages written to {dst}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
