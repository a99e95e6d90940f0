//! What every study's summary and report share: tables rendered as Markdown and HTML, HTML
//! escaping, the environment line and the SVG line charts ([`plot`]). Reads results; no study
//! module is imported here.

pub(crate) mod plot;

use std::fmt::Write as _;

/// A table rendered both as Markdown and as HTML.
pub(crate) struct Table {
    pub(crate) title: String,
    /// What the table's columns mean, said under its short heading.
    pub(crate) note: Option<String>,
    pub(crate) headers: Vec<String>,
    pub(crate) rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(title: &str, headers: &[&str]) -> Table {
        Table {
            title: title.into(),
            note: None,
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// The table with `note` said under its heading.
    pub(crate) fn noted(mut self, note: &str) -> Table {
        self.note = Some(note.into());
        self
    }

    pub(crate) fn md(&self) -> String {
        let note = self
            .note
            .as_ref()
            .map_or(String::new(), |n| format!("{n}\n\n"));
        let mut s = format!(
            "## {}\n\n{note}| {} |\n|{}\n",
            self.title,
            self.headers.join(" | "),
            "---|".repeat(self.headers.len())
        );
        for r in &self.rows {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        s.push('\n');
        s
    }

    pub(crate) fn html(&self) -> String {
        let note = self
            .note
            .as_ref()
            .map_or(String::new(), |n| format!("<p>{}</p>\n", esc(n)));
        let mut s = format!("<h2>{}</h2>\n{note}<table>\n<tr>", esc(&self.title));
        for h in &self.headers {
            let _ = write!(s, "<th>{}</th>", esc(h));
        }
        s.push_str("</tr>\n");
        for r in &self.rows {
            s.push_str("<tr>");
            for c in r {
                // A sentence keeps a readable width on a phone; the table scrolls instead.
                let class = if c.len() > LONG_CELL {
                    " class=\"text\""
                } else {
                    ""
                };
                let _ = write!(s, "<td{class}>{}</td>", esc(c));
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</table>\n");
        s
    }
}

/// Cells longer than this many bytes are sentences (a recommendation's reason, a note).
const LONG_CELL: usize = 60;

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The host and command of a run: kernel, CPUs, version, command line.
pub(crate) fn environment_line_of(e: &crate::window::Environment) -> String {
    format!(
        "kernel {}, {} x {}, sendpath {}, command: `{}`",
        e.kernel,
        e.probe.cpus,
        e.cpu,
        e.sendpath_version,
        e.command_line.join(" ")
    )
}

/// What every HTML report's style ends with so it reads on a phone as on a laptop: charts
/// shrink to the width of the screen (they carry a viewBox), two to a row on a wide screen
/// and one on a narrow one, wide tables scroll sideways instead of running off the page (a
/// cell holding a sentence keeps 18em, so its words are not stacked one to a line), long
/// words wrap, and the margins narrow on small screens.
pub(crate) const NARROW_SCREENS_CSS: &str = "svg{max-width:100%;height:auto}\
     table{display:block;overflow-x:auto;max-width:100%}td.text{min-width:18em}\
     .plots>figure{flex:1 1 560px;max-width:calc(50% - 6px)}p,li{overflow-wrap:anywhere}\
     @media (max-width:1100px){.plots>figure{max-width:100%}}\
     @media (max-width:700px){body{margin:.6em}h1{font-size:1.5em}h2{font-size:1.15em}}";

/// The head of an HTML report: its title, a viewport for phones, and its style.
pub(crate) fn html_head(title: &str, css: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title>\n<style>{css}{NARROW_SCREENS_CSS}</style></head><body>\n<h1>{title}</h1>\n"
    )
}

/// `html` with a list of its sections after the page's title: every `<h2>` gets an id and a
/// link in a "Contents" list.
pub(crate) fn with_contents(html: &str) -> String {
    let mut out = String::with_capacity(html.len() + 1024);
    let mut links = String::new();
    let mut rest = html;
    let mut n = 0;
    while let Some(at) = rest.find("<h2>") {
        let end = rest[at..].find("</h2>").map_or(rest.len(), |e| at + e);
        n += 1;
        let title = &rest[at + 4..end];
        let _ = writeln!(links, "<li><a href=\"#s{n}\">{title}</a></li>");
        out.push_str(&rest[..at]);
        let _ = write!(out, "<h2 id=\"s{n}\">");
        rest = &rest[at + 4..];
    }
    out.push_str(rest);
    let contents = format!("<nav><b>Contents</b><ul>\n{links}</ul></nav>\n");
    match out.find("</h1>") {
        Some(i) if n > 1 => format!("{}{contents}{}", &out[..i + 5], &out[i + 5..]),
        _ => out,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sentence_in_a_cell_keeps_a_readable_width() {
        let mut t = super::Table::new("T", &["use", "why"]);
        let why = "at 4KiB: no path beat copy (closest: uring, faster in 4/5 rounds)";
        t.rows.push(vec!["copy".into(), why.into()]);
        let html = t.html();
        assert!(html.contains("<td>copy</td>"), "{html}");
        assert!(
            html.contains(&format!("<td class=\"text\">{why}</td>")),
            "{html}"
        );
        assert!(super::NARROW_SCREENS_CSS.contains("td.text{min-width:18em}"));
    }

    #[test]
    fn contents_link_every_section_after_the_title() {
        let page = super::with_contents("<h1>t</h1>\n<h2>A &amp; B</h2>x<h2>C</h2>y");
        assert_eq!(
            page,
            "<h1>t</h1><nav><b>Contents</b><ul>\n<li><a href=\"#s1\">A &amp; B</a></li>\n<li><a href=\"#s2\">C</a></li>\n</ul></nav>\n\n<h2 id=\"s1\">A &amp; B</h2>x<h2 id=\"s2\">C</h2>y"
        );
        // One section: no list.
        assert_eq!(
            super::with_contents("<h1>t</h1><h2>A</h2>"),
            "<h1>t</h1><h2 id=\"s1\">A</h2>"
        );
    }
}
