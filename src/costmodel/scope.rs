//! What a fit pinned down, as the fitted profile records it ([`crate::costmodel::Profile`]'s
//! `fit_scope`): plain data, so that the profile can hold it without depending on the fit. The
//! fit writes it (`fit::scope_of`); the queries on it are
//! [`crate::costmodel::Profile::is_fitted`] and the others beside it.

/// A parameter the fit left at the starting profile's value, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct HeldParam {
    pub(crate) name: String,
    pub(crate) value: f64,
    pub(crate) reason: String,
}

/// What a fit pinned down, recorded in the fitted profile (`Profile::fit_scope`): the
/// parameters it moved, those it held with the reason, and the sizes its points span. Every
/// parameter not in `fitted` keeps the value of `base`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct FitScope {
    /// The profile the fit started from.
    pub(crate) base: String,
    /// The parameters the fit moved (`Param::name`; `p2p.signal_us`, `p2p.read_gbps`).
    pub(crate) fitted: Vec<String>,
    /// The parameters the data touched but could not pin down, held at `base`'s values.
    pub(crate) held: Vec<HeldParam>,
    /// The smallest and largest collective size of the points (nccl-tests size, bytes).
    pub(crate) bytes: [u64; 2],
}
