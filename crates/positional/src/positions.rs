//! Where each token sits: the one type every position-aware module takes.

use burn::tensor::{Device, Int, Tensor};

use crate::error::PositionalError;

/// The positions of a call's tokens, as every position-aware module of this workspace takes them
/// (sinusoids, learned tables, RoPE, ALiBi, T5's bias, attention, whole models).
///
/// Most calls pass a plain number: `rope.forward(q, k, 0)` is a prefill, `rope.forward(q, k,
/// cache_len)` a decoding step. Per-token positions pass a tensor: a left-padded batch's
/// `cumsum(!padding) - 1`, as Hugging Face's `generate` computes them.
///
/// Multi-axis RoPE ([`MultiAxisRope`](crate::MultiAxisRope)) reads a position vector per token,
/// [`Positions::Axes`]; every other module takes one number per token and refuses them by name.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Positions {
    /// Token `i` of every row sits at `start + i`.
    Start(usize),
    /// `[batch, seq]`: token `i` of row `b` sits at `ids[b, i]`. Positions need not be sorted.
    Ids(Tensor<2, Int>),
    /// `[batch, seq, axes]`: token `i` of row `b` sits at the vector `axes[b, i, ..]` (an image
    /// patch's row and column; M-RoPE's time, height and width). Hugging Face's Qwen2-VL
    /// `position_ids [3, batch, seq]` is this tensor's `permute([2, 0, 1])`.
    Axes(Tensor<3, Int>),
}

impl Positions {
    /// The positions of tokens `start .. start + len` of the sequence (a chunk of a prompt).
    pub fn narrow(self, start: usize, len: usize) -> Self {
        match self {
            Self::Start(first) => Self::Start(first + start),
            Self::Ids(ids) => Self::Ids(ids.narrow(1, start, len)),
            Self::Axes(axes) => Self::Axes(axes.narrow(1, start, len)),
        }
    }

    /// The per-token positions, or `None` for a start offset (or multi-axis positions).
    pub fn ids(&self) -> Option<&Tensor<2, Int>> {
        match self {
            Self::Ids(ids) => Some(ids),
            Self::Start(_) | Self::Axes(_) => None,
        }
    }

    /// The error of a module that reads one number per token when handed multi-axis positions.
    pub(crate) fn axes_refused(input: &'static str, axes: &Tensor<3, Int>) -> PositionalError {
        PositionalError::input(
            input,
            format!("multi-axis positions of dims {:?}", axes.dims()),
            "must be a start or per-token ids [batch, seq]: only multi-axis RoPE reads a \
             position vector per token",
        )
    }

    /// [`try_into_ids`](Self::try_into_ids), or `None` where the positions are the token indices
    /// `index_start ..` the caller counts anyway (a start equal to a cache's length): the index
    /// paths then run, which read nothing back.
    pub fn try_into_ids_unless_indices(
        self,
        index_start: usize,
        input: &'static str,
        batch: usize,
        len: usize,
        device: &Device,
    ) -> Result<Option<Tensor<2, Int>>, PositionalError> {
        match self {
            Self::Start(start) if start == index_start => Ok(None),
            positions => positions.try_into_ids(input, batch, len, device).map(Some),
        }
    }

    /// The positions of `len` tokens in each of `batch` rows as a `[batch, len]` tensor in the
    /// device's integer type: a start's range repeated per row, or the ids as given (a single
    /// row repeated to `batch`). `input` names them in errors.
    pub fn try_into_ids(
        self,
        input: &'static str,
        batch: usize,
        len: usize,
        device: &Device,
    ) -> Result<Tensor<2, Int>, PositionalError> {
        match self {
            Self::Start(start) => {
                let row: Vec<i64> = start_range(input, start, len)?.collect();
                let values = row.repeat(batch);
                crate::ints::try_ints(input, values, [batch, len], device)
            }
            Self::Ids(ids) => {
                let [rows, ids_len] = ids.dims();
                if ids_len != len || !(rows == batch || rows == 1) {
                    return Err(PositionalError::input(
                        input,
                        format!("dims {:?}", ids.dims()),
                        format!("must be [batch or 1, len] = [{batch}, {len}]"),
                    ));
                }
                let ids = crate::ints::device_ints(input, ids)?;
                Ok(match rows == batch {
                    true => ids,
                    false => ids.repeat_dim(0, batch),
                })
            }
            Self::Axes(axes) => Err(Self::axes_refused(input, &axes)),
        }
    }

    /// The largest row count of per-token positions among `positions`; 1 when none has any.
    pub(crate) fn batch_of(positions: &[&Self]) -> usize {
        positions
            .iter()
            .filter_map(|p| p.ids())
            .map(|ids| ids.dims()[0])
            .max()
            .unwrap_or(1)
    }
}

/// The positions `start .. start + len` as i64, or an error naming `input` when they pass i64.
pub(crate) fn start_range(
    input: &'static str,
    start: usize,
    len: usize,
) -> Result<std::ops::Range<i64>, PositionalError> {
    start
        .checked_add(len)
        .and_then(|end| Some(i64::try_from(start).ok()?..i64::try_from(end).ok()?))
        .ok_or_else(|| {
            PositionalError::input(input, start, format!("+ {len} must be at most i64::MAX"))
        })
}

impl Default for Positions {
    /// Token indices from 0.
    fn default() -> Self {
        Self::Start(0)
    }
}

impl From<usize> for Positions {
    fn from(start: usize) -> Self {
        Self::Start(start)
    }
}

impl From<Tensor<2, Int>> for Positions {
    /// Per-token positions `[batch, seq]`.
    fn from(ids: Tensor<2, Int>) -> Self {
        Self::Ids(ids)
    }
}

impl From<Tensor<3, Int>> for Positions {
    /// Multi-axis positions `[batch, seq, axes]`.
    fn from(axes: Tensor<3, Int>) -> Self {
        Self::Axes(axes)
    }
}

impl From<Tensor<1, Int>> for Positions {
    /// Positions `[seq]` shared by every row, as `[1, seq]`.
    fn from(ids: Tensor<1, Int>) -> Self {
        match ids.dims() {
            // Burn's reshape panics on an empty tensor (cubecl-zspace 0.11.3); an empty row of
            // positions is made instead, which the modules then refuse by name.
            [0] => Self::Ids(Tensor::zeros([1, 0], &ids.device())),
            [seq] => Self::Ids(ids.reshape([1, seq])),
        }
    }
}
