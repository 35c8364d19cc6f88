//! README's configuration tables are rendered from the settings declaration: a key added,
//! removed or changed there without the README (or the other way round) fails here, printing
//! the table to paste.

use keel_runtime::settings::{Binary, markdown_table};

/// The Markdown table that follows `heading` in `readme` (the lines from the first starting
/// with `| Keel key` to the last consecutive one starting with `|`).
fn table_after(readme: &str, heading: &str) -> Option<String> {
    let section = &readme[readme.find(heading)? + heading.len()..];
    let start = section.find("\n| Keel key")? + 1;
    Some(
        section[start..]
            .lines()
            .take_while(|l| l.starts_with('|'))
            .map(|l| format!("{l}\n"))
            .collect(),
    )
}

#[test]
fn readme_tables_are_the_declaration() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md at the workspace root");
    for (binary, heading) in [
        (Binary::Controller, "## Controller configuration\n"),
        (Binary::Broker, "## Broker configuration\n"),
    ] {
        let want = markdown_table(binary);
        let have = table_after(&readme, heading)
            .unwrap_or_else(|| panic!("README has no table under {heading:?}"));
        assert!(
            have == want,
            "README's table under {heading:?} differs from the declaration \
             (keel_runtime::settings::SETTINGS); expected:\n{want}"
        );
    }
}

#[test]
fn the_table_is_found_and_compared_whole() {
    let readme = "## Broker configuration\ntext\n\n| Keel key | x |\n|---|\n| `a` | 1 |\n\nafter\n";
    assert_eq!(
        table_after(readme, "## Broker configuration\n").as_deref(),
        Some("| Keel key | x |\n|---|\n| `a` | 1 |\n")
    );
    assert_eq!(table_after(readme, "## Controller configuration\n"), None);
}
