//! The templates' HTML escaper (named in `askama.toml`): every value a
//! template prints goes through it unless marked `|safe` (only the charts).

/// The templates' HTML escaper: `&` `<` `>` `"` `'` as `&amp;` `&lt;`
/// `&gt;` `&quot;` `&#x27;` (named entities, so escaped text reads plainly in
/// the page source).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HtmlEscaper;

impl askama::filters::Escaper for HtmlEscaper {
    fn write_escaped_str<W: std::fmt::Write>(&self, mut dest: W, s: &str) -> std::fmt::Result {
        let mut last = 0;
        for (i, b) in s.bytes().enumerate() {
            let rep = match b {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                b'\'' => "&#x27;",
                _ => continue,
            };
            dest.write_str(&s[last..i])?;
            dest.write_str(rep)?;
            last = i + 1;
        }
        dest.write_str(&s[last..])
    }
}

#[cfg(test)]
mod tests {
    use askama::filters::Escaper;

    #[test]
    fn the_escaper_escapes_markup_and_quotes() {
        let mut out = String::new();
        super::HtmlEscaper
            .write_escaped_str(&mut out, "<script>alert('x') & \"y\"</script>é")
            .unwrap();
        assert_eq!(
            out,
            "&lt;script&gt;alert(&#x27;x&#x27;) &amp; &quot;y&quot;&lt;/script&gt;é"
        );
    }
}
