//! NCCL's list syntax for NCCL_ALGO and NCCL_PROTO, in one place: `a,b` (only these), `^a,b`
//! (all but these) and, since NCCL 2.24, per-function entries separated by `;`
//! (`ring;allreduce:tree`: Ring for everything, Tree for all-reduce). The sweep's log checks
//! ([`crate::sweep::matrix::nccl_list_allows`]) and the cost model's `--proto`/`--algo`
//! ([`crate::costmodel::Force`]) read values through [`entries`]; what a name means is theirs.

/// One `;`-separated entry: `[func:][^]item,item,...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry<'a> {
    /// The function before `:` as written (untrimmed), or None for an entry of every function.
    pub(crate) func: Option<&'a str>,
    /// `^`: the items are the ones NOT allowed.
    pub(crate) negate: bool,
    /// The items, trimmed, empty ones left out.
    pub(crate) items: Vec<&'a str>,
}

/// The entries of `value`, in order (later entries win over earlier ones for the same function).
pub(crate) fn entries(value: &str) -> Vec<Entry<'_>> {
    value
        .split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|part| {
            let (func, list) = match part.split_once(':') {
                Some((f, l)) => (Some(f), l),
                None => (None, part),
            };
            let list = list.trim();
            let (negate, list) = match list.strip_prefix('^') {
                Some(rest) => (true, rest),
                None => (false, list),
            };
            Entry {
                func,
                negate,
                items: list
                    .split(',')
                    .map(str::trim)
                    .filter(|i| !i.is_empty())
                    .collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_negated_and_per_function_entries() {
        assert_eq!(
            entries("LL, LL128"),
            vec![Entry {
                func: None,
                negate: false,
                items: vec!["LL", "LL128"]
            }]
        );
        assert_eq!(
            entries(" ring ; allreduce:^tree,;"),
            vec![
                Entry {
                    func: None,
                    negate: false,
                    items: vec!["ring"]
                },
                Entry {
                    func: Some("allreduce"),
                    negate: true,
                    items: vec!["tree"]
                }
            ]
        );
        assert!(entries(" ; ").is_empty());
    }
}
