//! The page's HTML pieces: text escaped, lists, excerpts, warnings, tables, and its style.

use std::fmt::Write as _;

use serde_json::Value;

use crate::view::explained::Excerpt;

/// Each warning in its box.
pub(super) fn warnings_html(html: &mut String, warnings: &[String]) {
    for warning in warnings {
        let _ = write!(
            html,
            "<div class=\"warn\"><span class=\"label\">warning</span>{}</div>",
            escape(warning)
        );
    }
}

/// Lines as a list, each after its label in bold (when it has one).
pub(super) fn list_html<'a>(html: &mut String, items: impl Iterator<Item = (&'a str, &'a str)>) {
    html.push_str("<ul>");
    for (label, text) in items {
        html.push_str("<li>");
        if !label.is_empty() {
            let _ = write!(html, "<span class=\"label\">{}</span>", escape(label));
        }
        let _ = write!(html, "{}</li>", escape(text));
    }
    html.push_str("</ul>");
}

/// An excerpt pre-formatted under its title, with what was left out as its last line.
pub(super) fn pre_html(html: &mut String, title: &str, excerpt: &Excerpt) {
    let mut text = excerpt.lines.join("\n");
    if let Some(more) = &excerpt.left_out {
        text.push('\n');
        text.push_str(more);
    }
    let _ = write!(
        html,
        "<p class=\"stack\">{}</p><pre>{}</pre>",
        escape(title),
        escape(&text)
    );
}

pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

pub(super) fn pretty(value: &Value) -> String {
    escape(&serde_json::to_string_pretty(value).unwrap_or_default())
}

pub(super) const STYLE: &str = "*{box-sizing:border-box}body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1100px;padding:16px;color:#222}\
h1{font-size:20px;margin:0 0 4px;overflow-wrap:anywhere}h2{font-size:16px;margin:24px 0 8px;border-bottom:1px solid #ddd}h3{font-size:14px;margin:14px 0 2px}\
.command code{overflow-wrap:anywhere}\
.banner{padding:12px 16px;border-radius:6px;color:#fff;margin:12px 0;overflow-wrap:anywhere}.passed{background:#2e7d32}.failed{background:#c62828}.other{background:#555}\
.banner .kind{font-weight:bold;text-transform:uppercase;margin-right:8px}\
.glance dl{display:grid;grid-template-columns:repeat(auto-fill,minmax(240px,1fr));gap:8px;margin:0}\
.glance dl div{background:#f6f7f9;border-radius:6px;padding:8px 10px}.glance dt{font-size:11px;text-transform:uppercase;color:#666;letter-spacing:.04em}\
.glance dd{margin:2px 0 0;font-size:14px;overflow-wrap:anywhere}\
.hint{font-size:13px;color:#555;margin:4px 0}.zoom-hint{display:none}.zoomable .zoom-hint{display:inline}\
.key,.legend{font-size:12px;color:#333;margin:4px 0}.key span,.legend span{display:inline-block;margin-right:14px}\
.key i,.legend i{display:inline-block;width:18px;height:0;border-top:2px solid;vertical-align:middle;margin-right:5px}\
.key i.dash,.legend i.dash{border-top-style:dashed}.key i.shade{height:10px;border:0;background:rgba(240,160,48,.3)}\
.errors{font-size:13px;margin:4px 0;padding-left:20px;color:#8a4b00}.note{font-size:13px;margin:4px 0;color:#555}\
svg.chart{width:100%;height:auto;display:block}.live{display:none}.zoomable .live{display:block}.zoomable .static{display:none}\
.uplot{font-family:inherit}.u-legend{font-size:12px}.u-legend:not(.u-live) .u-series:first-child{display:none}.u-legend th,.u-legend td{border:0;padding:1px 4px}\
table{border-collapse:collapse;font-size:13px;max-width:100%}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top;overflow-wrap:anywhere}th{overflow-wrap:break-word}\
pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px;max-height:400px;margin:0}.empty{color:#777;font-style:italic}\
.tail{display:flex;flex-direction:column-reverse;max-height:400px;overflow:auto;background:#f6f6f6}.tail pre{max-height:none;overflow:visible}\
pre.timeline{white-space:pre-wrap;overflow-wrap:anywhere;max-height:none}\
footer{margin-top:24px;font-size:12px;color:#555;word-break:break-all}\
.evidence{overflow-wrap:anywhere}.evidence h3{font-size:14px;margin:12px 0 4px;font-family:ui-monospace,monospace}\
.evidence ul{margin:4px 0;padding-left:20px;font-size:13px}.label{font-weight:bold;margin-right:6px}\
.evidence .stack{font-size:12px;color:#555;margin:6px 0 0}.evidence pre{margin:2px 0 6px;max-height:300px}\
.process{border-left:3px solid #c62828;padding:2px 0 2px 10px;margin:8px 0}\
.findings{margin-top:10px}.warn{background:#fff3e0;border-left:4px solid #ef6c00;padding:6px 10px;margin:6px 0;font-size:13px}\
.small-charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(420px,100%),1fr));column-gap:20px}.small-charts .chart{min-width:0}\
.legend i.shade{height:10px;border:0}";

/// A flat JSON object as a two-column table.
pub(super) fn table(object: &Value) -> String {
    let Some(map) = object.as_object() else {
        return "<p class=\"empty\">none</p>".into();
    };
    if map.is_empty() {
        return "<p class=\"empty\">none</p>".into();
    }
    let mut html = String::from("<table>");
    for (key, value) in map {
        let shown = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        // A long name (`max_memory_growth_bytes_per_hour`) breaks after an underscore.
        let _ = write!(
            html,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(key).replace('_', "_<wbr>"),
            escape(&shown)
        );
    }
    html.push_str("</table>");
    html
}
