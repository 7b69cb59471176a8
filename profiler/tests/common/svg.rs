//! The flame graph read back as XML in tests.

/// Checks that `svg` is well-formed XML (balanced, matching tags) and returns its text.
pub fn svg_text(svg: &str) -> String {
    let mut reader = quick_xml::Reader::from_str(svg);
    let mut depth = 0usize;
    let mut text = String::new();
    let mut root = None;
    loop {
        match reader.read_event().expect("the SVG is not well-formed XML") {
            quick_xml::events::Event::Start(e) => {
                depth += 1;
                root.get_or_insert_with(|| String::from_utf8_lossy(e.name().as_ref()).into_owned());
            }
            quick_xml::events::Event::End(_) => depth -= 1,
            quick_xml::events::Event::Text(t) => {
                text.push_str(&t.decode().unwrap());
                text.push('\n');
            }
            quick_xml::events::Event::GeneralRef(r) => {
                // Entity references arrive apart from the text around them.
                let c = match &*r.decode().unwrap() {
                    "lt" => "<",
                    "gt" => ">",
                    "amp" => "&",
                    "quot" => "\"",
                    "apos" => "'",
                    other => panic!("unexpected entity {other}"),
                };
                text.pop();
                text.push_str(c);
            }
            quick_xml::events::Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(depth, 0, "unclosed elements");
    assert_eq!(root.as_deref(), Some("svg"));
    text
}
