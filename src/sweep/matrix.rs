//! The settings matrix: which points a sweep runs.
//!
//! Two ways to give values, hyperfine style:
//! - `-L NAME=a,b,c`: a list split on commas;
//! - `--set NAME=VALUE`: ONE value taken literally (commas and semicolons included), repeatable;
//!   several `--set` of the same name add values to that name's list. This is how to pass
//!   NCCL's per-function form, e.g. `--set 'NCCL_ALGO=allreduce:tree,ring;allgather:ring'`.
//!
//! Each name is one dimension; the points are the cross product of the dimensions, in the
//! order the names first appear. `--preset` adds one-at-a-time variations around the default
//! instead of a cross product (a cross product of 7 variables would be hundreds of points).
//! The baseline (nothing overridden) always comes first.

use serde::{Deserialize, Serialize};

use crate::error::usage;

/// One variable and the values to try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dimension {
    pub(crate) name: String,
    pub(crate) values: Vec<String>,
}

/// One setting of the sweep: the variables it sets on top of the parent environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    /// Short, file-name safe id, unique within the sweep: `p00-baseline`, `p03-PROTO-LL128`.
    pub id: String,
    /// (name, value) in dimension order; empty for the baseline.
    pub(crate) overrides: Vec<(String, String)>,
}

impl Point {
    #[cfg(test)]
    pub(crate) fn is_baseline(&self) -> bool {
        self.overrides.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn label(&self) -> String {
        label(&self.overrides)
    }

    /// The overrides sorted by name: what identifies the setting regardless of flag order.
    pub(crate) fn sorted_overrides(&self) -> Vec<(String, String)> {
        let mut v = self.overrides.clone();
        v.sort();
        v
    }

    /// The value this point gives `name`, if any.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.overrides
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A point's settings as words: `NCCL_PROTO=LL128 NCCL_ALGO=Ring`, or `(defaults)`.
pub(crate) fn label(overrides: &[(String, String)]) -> String {
    if overrides.is_empty() {
        return "(defaults)".into();
    }
    overrides
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Variables the sweep sets itself and so refuses to vary.
const RESERVED: &[&str] = &["NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS"];

fn check_name(name: &str, flag: &str) -> anyhow::Result<()> {
    let valid = name.starts_with("NCCL_")
        && name.len() > 5
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if !valid {
        return Err(usage(format!(
            "{flag} '{name}': the sweep varies NCCL_* variables (upper case, e.g. NCCL_PROTO); export any other variable before running the sweep"
        )));
    }
    if RESERVED.contains(&name) {
        return Err(usage(format!(
            "{flag} {name}: the sweep sets NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE itself (for the probe run that proves what NCCL did); leave them out"
        )));
    }
    Ok(())
}

fn check_value(name: &str, value: &str, flag: &str) -> anyhow::Result<()> {
    if value.is_empty() {
        return Err(usage(format!(
            "{flag} {name}: empty value; give at least one value, e.g. {flag} {name}=a,b"
        )));
    }
    if name == "NCCL_NVLS_ENABLE" && value != "0" {
        return Err(usage(format!(
            "{flag} {name}={value}: this tool never enables NVLink multicast (it can take a shared host's GPUs out of service); NCCL_NVLS_ENABLE stays 0"
        )));
    }
    Ok(())
}

fn split_assignment<'a>(arg: &'a str, flag: &str) -> anyhow::Result<(&'a str, &'a str)> {
    arg.split_once('=').ok_or_else(|| {
        usage(format!(
            "{flag} '{arg}': expected NAME=VALUE, e.g. -L NCCL_PROTO=LL,LL128,Simple"
        ))
    })
}

/// Builds the dimensions from `-L NAME=a,b` and `--set NAME=VALUE` arguments, in the order the
/// names first appear (`-L` first, then `--set`). Duplicate values of a name are dropped.
pub fn dimensions(lists: &[String], sets: &[String]) -> anyhow::Result<Vec<Dimension>> {
    let mut dims: Vec<Dimension> = vec![];
    let mut add = |name: &str, value: &str| {
        match dims.iter_mut().find(|d| d.name == name) {
            Some(d) => {
                if !d.values.iter().any(|v| v == value) {
                    d.values.push(value.to_string());
                }
            }
            None => dims.push(Dimension {
                name: name.to_string(),
                values: vec![value.to_string()],
            }),
        };
    };
    for arg in lists {
        let (name, list) = split_assignment(arg, "-L")?;
        check_name(name, "-L")?;
        let values: Vec<&str> = list.split(',').map(str::trim).collect();
        if list.trim().is_empty() || values.iter().any(|v| v.is_empty()) {
            return Err(usage(format!(
                "-L {name}: empty value in the list '{list}'; give comma-separated values, e.g. -L {name}=a,b (for a value that contains commas use --set {name}=VALUE)"
            )));
        }
        for v in values {
            check_value(name, v, "-L")?;
            add(name, v);
        }
    }
    for arg in sets {
        let (name, value) = split_assignment(arg, "--set")?;
        check_name(name, "--set")?;
        check_value(name, value, "--set")?;
        add(name, value);
    }
    Ok(dims)
}

fn id_part(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect::<String>()
        .split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// `p03-PROTO-LL128_ALGO-Ring` (at most ~60 characters, file-name safe).
fn point_id(index: usize, overrides: &[(String, String)]) -> String {
    if overrides.is_empty() {
        return format!("p{index:02}-baseline");
    }
    let mut label = overrides
        .iter()
        .map(|(k, v)| {
            format!(
                "{}-{}",
                id_part(k.strip_prefix("NCCL_").unwrap_or(k)),
                id_part(v)
            )
        })
        .collect::<Vec<_>>()
        .join("_");
    label.truncate(56);
    format!("p{index:02}-{label}")
}

/// One-at-a-time variations (a preset's, [`super::settings::preset`]): each entry is one
/// point, the variables it sets.
pub(crate) type Variations = &'static [&'static [(&'static str, &'static str)]];

/// The points: the baseline, the cross product of `dims`, then the preset's points, without
/// duplicates (the same overrides in any order count once). The library dimension
/// (`NCCL_LIB`, [`super::library`]) is crossed with all of them, the baseline included: the
/// points of its first library set no `NCCL_LIB` (the baseline stays "(defaults)"), each further
/// library repeats them all with `NCCL_LIB` first (ids `pNN-LIB-2...`).
pub fn points(dims: &[Dimension], preset: Option<Variations>) -> Vec<Point> {
    use super::library::NAME as LIB;
    let (libs, dims): (Vec<&Dimension>, Vec<&Dimension>) = dims.iter().partition(|d| d.name == LIB);
    let libs: Vec<&String> = libs.iter().flat_map(|d| &d.values).collect();
    // each setting once, whatever the order of its variables
    let mut seen = std::collections::BTreeSet::new();
    let settings: Vec<Vec<(String, String)>> = settings_of(&dims, preset)
        .into_iter()
        .filter(|s| {
            let mut sorted = s.clone();
            sorted.sort();
            seen.insert(sorted)
        })
        .collect();
    let mut out: Vec<Point> = vec![];
    for (i, lib) in libs
        .iter()
        .map(Some)
        .chain(libs.is_empty().then_some(None))
        .enumerate()
    {
        for s in &settings {
            let (mut overrides, mut for_id) = (vec![], vec![]);
            if let (Some(lib), true) = (lib, i > 0) {
                overrides.push((LIB.to_string(), lib.to_string()));
                for_id.push((LIB.to_string(), (i + 1).to_string()));
            }
            overrides.extend(s.iter().cloned());
            for_id.extend(s.iter().cloned());
            out.push(Point {
                id: point_id(out.len(), &for_id),
                overrides,
            });
        }
    }
    out
}

/// The settings of [`points`] before duplicates go: the baseline, the cross product of `dims`,
/// then the preset's points.
fn settings_of(dims: &[&Dimension], preset: Option<Variations>) -> Vec<Vec<(String, String)>> {
    let mut sets: Vec<Vec<(String, String)>> = vec![vec![]];
    // without dimensions the cross product is the baseline again, which `points` drops
    let mut cross: Vec<Vec<(String, String)>> = vec![vec![]];
    for d in dims {
        cross = cross
            .into_iter()
            .flat_map(|prefix| {
                d.values.iter().map(move |v| {
                    let mut p = prefix.clone();
                    p.push((d.name.clone(), v.clone()));
                    p
                })
            })
            .collect();
    }
    sets.extend(cross);
    sets.extend(preset.into_iter().flatten().map(|pt| {
        pt.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }));
    sets
}

/// The libraries of the sweep: the values of its `NCCL_LIB` dimension, resolved (none when it
/// has none).
pub(crate) fn libraries(dims: &[Dimension]) -> anyhow::Result<super::library::Libraries> {
    let values = dims
        .iter()
        .find(|d| d.name == super::library::NAME)
        .map_or(&[][..], |d| &d.values[..]);
    super::library::Libraries::from_values(values)
}

/// NCCL's list syntax ([`crate::nccl_list`]) for NCCL_ALGO and NCCL_PROTO: `a,b` (only these),
/// `^a,b` (all but these), and since NCCL 2.24 per-function entries separated by `;`, e.g.
/// `ring;allreduce:tree` (Ring for everything, Tree for all-reduce). Returns whether `name` (an algorithm or protocol) is
/// allowed for function `func` (`AllReduce`, ...; None when the log does not say), or None when
/// the value does not constrain it.
pub(crate) fn nccl_list_allows(value: &str, func: Option<&str>, name: &str) -> Option<bool> {
    let norm = |s: &str| {
        s.trim()
            .to_ascii_lowercase()
            .replace(['_', ' '], "")
            .to_string()
    };
    let name = norm(name);
    let mut default = None;
    let mut specific = None;
    for entry in crate::nccl_list::entries(value) {
        match entry.func {
            Some(f) => {
                if func.is_some_and(|func| norm(f) == norm(func)) {
                    specific = Some(entry);
                }
            }
            None => default = Some(entry),
        }
    }
    let entry = specific.or(default)?;
    let hit = entry.items.iter().any(|x| norm(x) == name);
    Some(hit != entry.negate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::settings::{preset, PCIE};

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn lists_form_a_cross_product_after_the_baseline() {
        let d = dimensions(
            &s(&["NCCL_PROTO=LL,LL128,Simple", "NCCL_ALGO=Ring,Tree"]),
            &[],
        )
        .unwrap();
        let p = points(&d, None);
        assert_eq!(p.len(), 7);
        assert!(p[0].is_baseline());
        assert_eq!(p[0].id, "p00-baseline");
        assert_eq!(p[1].label(), "NCCL_PROTO=LL NCCL_ALGO=Ring");
        assert_eq!(p[1].id, "p01-PROTO-LL_ALGO-Ring");
        assert_eq!(p[6].label(), "NCCL_PROTO=Simple NCCL_ALGO=Tree");
        let ids: std::collections::BTreeSet<_> = p.iter().map(|x| &x.id).collect();
        assert_eq!(ids.len(), 7);
    }

    #[test]
    fn set_takes_commas_and_semicolons_literally_and_adds_to_the_list() {
        let d = dimensions(
            &s(&["NCCL_ALGO=Ring"]),
            &s(&[
                "NCCL_ALGO=allreduce:tree,ring;allgather:ring",
                "NCCL_ALGO=ring;allreduce:tree",
            ]),
        )
        .unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(
            d[0].values,
            s(&[
                "Ring",
                "allreduce:tree,ring;allgather:ring",
                "ring;allreduce:tree"
            ])
        );
        let p = points(&d, None);
        assert_eq!(p.len(), 4);
        assert!(p.iter().all(|x| x
            .id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))));
    }

    #[test]
    fn bad_input_is_a_usage_error() {
        for (l, want) in [
            ("NCCL_PROTO=", "empty value"),
            ("NCCL_PROTO=LL,", "empty value"),
            ("NCCL_PROTO", "expected NAME=VALUE"),
            ("PROTO=LL", "NCCL_* variables"),
            ("NCCL_DEBUG=INFO", "sets NCCL_DEBUG"),
            ("NCCL_NVLS_ENABLE=1", "never enables NVLink multicast"),
        ] {
            let e = dimensions(&s(&[l]), &[]).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2);
            assert!(e.to_string().contains(want), "{l}: {e}");
        }
        assert!(dimensions(&[], &s(&["NCCL_ALGO="])).is_err());
        assert!(dimensions(&s(&["NCCL_NVLS_ENABLE=0"]), &[]).is_ok());
    }

    #[test]
    fn preset_is_one_at_a_time_and_deduplicated_against_lists() {
        let d = dimensions(&s(&["NCCL_PROTO=LL"]), &[]).unwrap();
        let p = points(&d, Some(preset("pcie").unwrap().points));
        assert_eq!(p.len(), 1 + PCIE.points.len());
        assert!(p.iter().skip(1).all(|x| !x.overrides.is_empty()));
        assert!(p.iter().any(|x| x.get("NCCL_P2P_DISABLE") == Some("1")));
        assert!(preset("nvlink").is_err());
    }

    #[test]
    fn libraries_repeat_every_point_the_first_without_nccl_lib() {
        let d = dimensions(
            &s(&[
                "NCCL_PROTO=LL,Simple",
                "NCCL_LIB=/a/libnccl.so.2.28.3,/b/libnccl.so.2",
            ]),
            &[],
        )
        .unwrap();
        let p = points(&d, None);
        // without the libraries: the baseline, LL, Simple = 3 points; two libraries: 2 x 3
        assert_eq!(p.len(), 6);
        let labels: Vec<String> = p.iter().map(|x| x.label()).collect();
        assert_eq!(
            labels,
            [
                "(defaults)",
                "NCCL_PROTO=LL",
                "NCCL_PROTO=Simple",
                "NCCL_LIB=/b/libnccl.so.2",
                "NCCL_LIB=/b/libnccl.so.2 NCCL_PROTO=LL",
                "NCCL_LIB=/b/libnccl.so.2 NCCL_PROTO=Simple",
            ]
        );
        let ids: Vec<&str> = p.iter().map(|x| x.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "p00-baseline",
                "p01-PROTO-LL",
                "p02-PROTO-Simple",
                "p03-LIB-2",
                "p04-LIB-2_PROTO-LL",
                "p05-LIB-2_PROTO-Simple"
            ]
        );
        // one library alone adds no point
        let one = dimensions(&s(&["NCCL_LIB=/a/libnccl.so.2.28.3", "NCCL_PROTO=LL"]), &[]).unwrap();
        assert_eq!(points(&one, None).len(), 2);
    }

    #[test]
    fn nccl_list_syntax() {
        assert_eq!(
            nccl_list_allows("LL128", Some("AllReduce"), "LL128"),
            Some(true)
        );
        assert_eq!(
            nccl_list_allows("LL128", Some("AllReduce"), "LL"),
            Some(false)
        );
        assert_eq!(nccl_list_allows("^LL128", None, "LL"), Some(true));
        assert_eq!(nccl_list_allows("Ring,Tree", None, "TREE"), Some(true));
        let v = "ring;allreduce:tree";
        assert_eq!(nccl_list_allows(v, Some("AllReduce"), "TREE"), Some(true));
        assert_eq!(nccl_list_allows(v, Some("AllReduce"), "RING"), Some(false));
        assert_eq!(nccl_list_allows(v, Some("AllGather"), "RING"), Some(true));
        assert_eq!(
            nccl_list_allows("allreduce:tree", Some("AllGather"), "RING"),
            None
        );
        assert_eq!(
            nccl_list_allows("collnetdirect", None, "COLLNET_DIRECT"),
            Some(true)
        );
    }
}
