//! The environment variables NCCL reads, so a misspelt one can be caught before it silently
//! changes nothing.
//!
//! NCCL ignores any `NCCL_*` name it does not know: no warning, no error. A setting such as
//! `NCCL_PROTOCOL=LL` (the real name is `NCCL_PROTO`) therefore looks applied in every process
//! and has no effect. The list below follows NCCL's documentation of environment variables
//! (releases 2.18 to 2.27), including older names NCCL still accepts; it is a list of names, not
//! of values. Other commands (sweep, env) reuse [`is_known_nccl_var`] and [`suggest`].

/// Every `NCCL_*` variable name verifybench knows NCCL to read, sorted.
pub(crate) const KNOWN_NCCL_VARS: &[&str] = &[
    "NCCL_ALGO",
    "NCCL_ALLOC_P2P_NET_LL_BUFFERS",
    "NCCL_BUFFSIZE",
    "NCCL_CGA_CLUSTER_SIZE",
    "NCCL_CHECKS_DISABLE",
    "NCCL_CHECK_POINTERS",
    "NCCL_COLLNET_ENABLE",
    "NCCL_COLLNET_NODE_THRESHOLD",
    "NCCL_COMM_BLOCKING",
    "NCCL_COMM_ID",
    "NCCL_COMM_SPLIT_SHARE_RESOURCES",
    "NCCL_CONF_FILE",
    "NCCL_CREATE_THREAD_CONTEXT",
    "NCCL_CROSS_NIC",
    "NCCL_CTA_POLICY",
    "NCCL_CUMEM_ENABLE",
    "NCCL_CUMEM_HOST_ENABLE",
    "NCCL_DEBUG",
    "NCCL_DEBUG_FILE",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_TIMESTAMP_FORMAT",
    "NCCL_DEBUG_TIMESTAMP_LEVELS",
    "NCCL_DMABUF_ENABLE",
    "NCCL_ENV_PLUGIN",
    "NCCL_GDRCOPY_ENABLE",
    "NCCL_GDRCOPY_FIFO_ENABLE",
    "NCCL_GDRCOPY_FLUSH_ENABLE",
    "NCCL_GDRCOPY_SYNC_ENABLE",
    "NCCL_GRAPH_DUMP_FILE",
    "NCCL_GRAPH_FILE",
    "NCCL_GRAPH_MIXING_SUPPORT",
    "NCCL_GRAPH_REGISTER",
    "NCCL_HOSTID",
    "NCCL_IB_ADAPTIVE_ROUTING",
    "NCCL_IB_ADDR_FAMILY",
    "NCCL_IB_ADDR_RANGE",
    "NCCL_IB_AR_THRESHOLD",
    "NCCL_IB_CUDA_SUPPORT",
    "NCCL_IB_DATA_DIRECT",
    "NCCL_IB_DISABLE",
    "NCCL_IB_ECE_ENABLE",
    "NCCL_IB_FIFO_TC",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_HCA",
    "NCCL_IB_MERGE_NICS",
    "NCCL_IB_MERGE_VFS",
    "NCCL_IB_PCI_RELAXED_ORDERING",
    "NCCL_IB_PKEY",
    "NCCL_IB_QPS_PER_CONNECTION",
    "NCCL_IB_RETRY_CNT",
    "NCCL_IB_RETURN_ASYNC_EVENTS",
    "NCCL_IB_ROCE_VERSION_NUM",
    "NCCL_IB_SL",
    "NCCL_IB_SPLIT_DATA_ON_QPS",
    "NCCL_IB_TC",
    "NCCL_IB_TIMEOUT",
    "NCCL_IB_USE_INLINE",
    "NCCL_IGNORE_CPU_AFFINITY",
    "NCCL_IGNORE_DISABLED_P2P",
    "NCCL_L1_SHARED_MEMORY_CARVEOUT",
    "NCCL_LAUNCH_MODE",
    "NCCL_LAUNCH_ORDER_IMPLICIT",
    "NCCL_LAUNCH_RACE_FATAL",
    "NCCL_LEGACY_CUDA_REGISTER",
    "NCCL_LL128_BUFFSIZE",
    "NCCL_LL128_NTHREADS",
    "NCCL_LL_BUFFSIZE",
    "NCCL_LL_THRESHOLD",
    "NCCL_LOCAL_REGISTER",
    "NCCL_MAX_CTAS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_MAX_NRINGS",
    "NCCL_MAX_P2P_NCHANNELS",
    "NCCL_MEM_SYNC_DOMAIN",
    "NCCL_MIN_CTAS",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MIN_NRINGS",
    "NCCL_MIN_P2P_NCHANNELS",
    "NCCL_MNNVL_CLIQUE_ID",
    "NCCL_MNNVL_ENABLE",
    "NCCL_MNNVL_UUID",
    "NCCL_NCHANNELS_PER_NET_PEER",
    "NCCL_NET",
    "NCCL_NETDEVS_POLICY",
    "NCCL_NET_DISABLE_INTRA",
    "NCCL_NET_FORCE_FLUSH",
    "NCCL_NET_GDR_C2C",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_NET_GDR_READ",
    "NCCL_NET_OVERHEAD",
    "NCCL_NET_PLUGIN",
    "NCCL_NET_SHARED_BUFFERS",
    "NCCL_NET_SHARED_COMMS",
    "NCCL_NSOCKS_PERTHREAD",
    "NCCL_NTHREADS",
    "NCCL_NVB_DISABLE",
    "NCCL_NVB_PRECONNECT",
    "NCCL_NVLSTREE_MAX_CHUNKSIZE",
    "NCCL_NVLS_CHUNKSIZE",
    "NCCL_NVLS_ENABLE",
    "NCCL_NVLS_NCHANNELS",
    "NCCL_NVTX_DISABLE",
    "NCCL_OOB_NET_ENABLE",
    "NCCL_OOB_NET_IFNAME",
    "NCCL_P2P_DIRECT_DISABLE",
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_P2P_LL_THRESHOLD",
    "NCCL_P2P_NET_CHUNKSIZE",
    "NCCL_P2P_NVL_CHUNKSIZE",
    "NCCL_P2P_PCI_CHUNKSIZE",
    "NCCL_P2P_PXN_LEVEL",
    "NCCL_P2P_READ_ENABLE",
    "NCCL_P2P_USE_CUDA_MEMCPY",
    "NCCL_PAT_ENABLE",
    "NCCL_PROFILER_PLUGIN",
    "NCCL_PROGRESS_APPENDOP_FREQ",
    "NCCL_PROTO",
    "NCCL_PROXY_APPEND_BATCH_SIZE",
    "NCCL_PROXY_DUMP_SIGNAL",
    "NCCL_PROXY_PROFILE",
    "NCCL_PXN_C2C",
    "NCCL_PXN_DISABLE",
    "NCCL_RAS_ADDR",
    "NCCL_RAS_ENABLE",
    "NCCL_RAS_TIMEOUT_FACTOR",
    "NCCL_RUNTIME_CONNECT",
    "NCCL_SET_STACK_SIZE",
    "NCCL_SET_THREAD_NAME",
    "NCCL_SHM_DISABLE",
    "NCCL_SHM_LOCALITY",
    "NCCL_SHM_MEMCPY_MODE",
    "NCCL_SHM_USE_CUDA_MEMCPY",
    "NCCL_SINGLE_RING_THRESHOLD",
    "NCCL_SOCKET_FAMILY",
    "NCCL_SOCKET_IFNAME",
    "NCCL_SOCKET_NTHREADS",
    "NCCL_SOCKET_RETRY_CNT",
    "NCCL_SOCKET_RETRY_SLEEP_MSEC",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_TOPO_FILE",
    "NCCL_TREE_THRESHOLD",
    "NCCL_TUNER_CONFIG_FILE",
    "NCCL_TUNER_PLUGIN",
    "NCCL_UID_STAGGER_RATE",
    "NCCL_UID_STAGGER_THRESHOLD",
    "NCCL_WARN_ENABLE_DEBUG_INFO",
    "NCCL_WIN_ENABLE",
    "NCCL_WORK_FIFO_BYTES",
    "NCCL_WORK_FIFO_DEPTH",
];

/// `NCCL_*` names that PyTorch (not NCCL) reads: the old spellings of its `TORCH_NCCL_*`
/// variables. They are not misspellings, but NCCL itself ignores them.
pub(crate) const TORCH_LEGACY_NCCL_VARS: &[(&str, &str)] = &[
    (
        "NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    ),
    ("NCCL_BLOCKING_WAIT", "TORCH_NCCL_BLOCKING_WAIT"),
    ("NCCL_DESYNC_DEBUG", "TORCH_NCCL_DESYNC_DEBUG"),
    ("NCCL_ENABLE_TIMING", "TORCH_NCCL_ENABLE_TIMING"),
];

/// Whether NCCL reads a variable of exactly this name (names are case-sensitive).
pub(crate) fn is_known_nccl_var(name: &str) -> bool {
    KNOWN_NCCL_VARS.binary_search(&name).is_ok()
}

/// The `TORCH_NCCL_*` name of an `NCCL_*` variable that PyTorch reads under its old name.
pub(crate) fn torch_legacy_alias(name: &str) -> Option<&'static str> {
    TORCH_LEGACY_NCCL_VARS
        .iter()
        .find(|(old, _)| *old == name)
        .map(|(_, new)| *new)
}

/// The words for a variable NCCL does not know, with the known name it may be a typo of:
/// `NCCL_PRTO is not a variable NCCL knows (did you mean NCCL_PROTO?): NCCL ignores it`.
pub(crate) fn unknown_words(name: &str) -> String {
    let hint = match suggest(name) {
        Some(s) => format!(" (did you mean {s}?)"),
        None => String::new(),
    };
    format!("{name} is not a variable NCCL knows{hint}: NCCL ignores it")
}

/// The known NCCL variable closest to `name`, for "did you mean NCCL_PROTO?".
///
/// Case is ignored (`nccl_proto` -> `NCCL_PROTO`). A known name that `name` extends or
/// shortens (`NCCL_PROTOCOL` -> `NCCL_PROTO`, `NCCL_ALGORITHM` -> `NCCL_ALGO`) wins; otherwise
/// the nearest by edit distance, if it is near enough to be a plausible typo. `None` for a known
/// name or when nothing is close.
pub(crate) fn suggest(name: &str) -> Option<&'static str> {
    if is_known_nccl_var(name) {
        return None;
    }
    let upper = name.to_ascii_uppercase();
    if let Ok(i) = KNOWN_NCCL_VARS.binary_search(&upper.as_str()) {
        return Some(KNOWN_NCCL_VARS[i]);
    }
    let tail = upper.strip_prefix("NCCL_").unwrap_or(&upper);
    if tail.len() >= 3 {
        // The longest known name that is a prefix of `name`, or that `name` is a prefix of.
        let best = KNOWN_NCCL_VARS
            .iter()
            .filter(|k| {
                let kt = &k[5..];
                (tail.starts_with(kt) && kt.len() >= 3)
                    || (kt.starts_with(tail) && kt.len() - tail.len() <= 4)
            })
            .max_by_key(|k| k.len());
        if let Some(k) = best {
            return Some(k);
        }
    }
    let (d, k) = KNOWN_NCCL_VARS
        .iter()
        .map(|&k| (edit_distance(tail, &k[5..]), k))
        .min()?;
    let limit = 1 + tail.len() / 4;
    (d <= limit).then_some(k)
}

/// Levenshtein distance over bytes (variable names are ASCII).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_is_sorted_unique_and_prefixed() {
        assert!(KNOWN_NCCL_VARS.windows(2).all(|w| w[0] < w[1]));
        assert!(KNOWN_NCCL_VARS.iter().all(|k| k.starts_with("NCCL_")));
        assert!(KNOWN_NCCL_VARS.len() > 100);
    }

    #[test]
    fn known_names() {
        for k in [
            "NCCL_PROTO",
            "NCCL_ALGO",
            "NCCL_P2P_DISABLE",
            "NCCL_P2P_LEVEL",
            "NCCL_SHM_DISABLE",
            "NCCL_NVLS_ENABLE",
            "NCCL_MIN_NCHANNELS",
            "NCCL_MAX_NCHANNELS",
            "NCCL_NTHREADS",
            "NCCL_BUFFSIZE",
            "NCCL_DEBUG",
            "NCCL_DEBUG_SUBSYS",
            "NCCL_DEBUG_FILE",
            "NCCL_SOCKET_IFNAME",
            "NCCL_IB_HCA",
            "NCCL_IB_DISABLE",
            "NCCL_NET",
            "NCCL_CUMEM_ENABLE",
            "NCCL_GRAPH_REGISTER",
            "NCCL_LAUNCH_MODE",
            "NCCL_NET_GDR_LEVEL",
            "NCCL_CROSS_NIC",
            "NCCL_TOPO_FILE",
            "NCCL_GRAPH_FILE",
            "NCCL_IGNORE_CPU_AFFINITY",
            "NCCL_COLLNET_ENABLE",
            "NCCL_RUNTIME_CONNECT",
            "NCCL_SET_THREAD_NAME",
        ] {
            assert!(is_known_nccl_var(k), "{k}");
            assert_eq!(suggest(k), None, "{k}");
        }
        assert!(!is_known_nccl_var("NCCL_PROTOCOL"));
        assert!(!is_known_nccl_var("nccl_proto"), "names are case-sensitive");
    }

    #[test]
    fn suggestions_for_typical_mistakes() {
        let cases = [
            ("NCCL_PROTOCOL", "NCCL_PROTO"),
            ("NCCL_ALGORITHM", "NCCL_ALGO"),
            ("nccl_proto", "NCCL_PROTO"),
            ("NCCL_P2P_DISSABLE", "NCCL_P2P_DISABLE"),
            ("NCCL_P2P_DISBLE", "NCCL_P2P_DISABLE"),
            ("NCCL_SOCKET_IFACE", "NCCL_SOCKET_IFNAME"),
            ("NCCL_MAX_NCHANNEL", "NCCL_MAX_NCHANNELS"),
            ("NCCL_BUFSIZE", "NCCL_BUFFSIZE"),
            ("NCCL_NVLS_ENABLED", "NCCL_NVLS_ENABLE"),
            ("NCCL_CUMEM_ENABLED", "NCCL_CUMEM_ENABLE"),
            ("NCCL_DEBUG_SUBSYSTEM", "NCCL_DEBUG_SUBSYS"),
        ];
        for (typo, want) in cases {
            assert_eq!(suggest(typo), Some(want), "{typo}");
        }
    }

    #[test]
    fn nothing_close_means_no_suggestion() {
        assert_eq!(suggest("NCCL_COMPLETELY_DIFFERENT_THING"), None);
        assert_eq!(suggest("NCCL_XYZZY"), None);
    }

    #[test]
    fn torch_names_are_not_nccl_names() {
        assert_eq!(
            torch_legacy_alias("NCCL_ASYNC_ERROR_HANDLING"),
            Some("TORCH_NCCL_ASYNC_ERROR_HANDLING")
        );
        assert!(!is_known_nccl_var("NCCL_ASYNC_ERROR_HANDLING"));
        assert_eq!(torch_legacy_alias("NCCL_PROTO"), None);
    }

    #[test]
    fn edit_distance_basics() {
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("PROTO", "PROTO"), 0);
    }
}
