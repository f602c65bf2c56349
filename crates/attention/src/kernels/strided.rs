//! Strided views of the CPU backends' buffers, which the CPU kernels read in place: ndarray's
//! arrays, flex's tensors and LibTorch's CPU tensors, each copied first only where its features
//! are not adjacent or a stride is negative. The attention kernels read `f32`; the decode-shaped
//! product also reads weights stored in `f16` and `bf16` on flex.

// Burn 0.22 deprecates its ndarray and LibTorch backends in favour of flex and CubeCL; users
// still run them.
#![allow(deprecated)]

/// `[batch, heads, rows, head_dim]` values of a buffer of `T`, features adjacent (stride 1):
/// element `(b, h, r, d)` at `values[b * strides[0] + h * strides[1] + r * strides[2] + d]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Strided<'a, T = f32> {
    pub values: &'a [T],
    pub shape: [usize; 4],
    pub strides: [usize; 3],
}

impl<'a, T> Strided<'a, T> {
    /// `values` read through `shape` and `strides` from element `offset`, when the features are
    /// adjacent and every stride is non-negative (so the elements lie at and after `offset`).
    pub fn new(
        values: &'a [T],
        shape: [usize; 4],
        strides: &[isize],
        offset: usize,
    ) -> Option<Self> {
        let strides: [isize; 4] = strides.try_into().ok()?;
        if strides[3] != 1 && shape[3] > 1 {
            return None;
        }
        let strides = [
            usize::try_from(strides[0]).ok()?,
            usize::try_from(strides[1]).ok()?,
            usize::try_from(strides[2]).ok()?,
        ];
        Some(Self {
            values: values.get(offset..)?,
            shape,
            strides,
        })
    }

    /// Rows `first .. first + len` of the view.
    pub fn rows(self, first: usize, len: usize) -> Self {
        Self {
            values: &self.values[first * self.strides[2]..],
            shape: [self.shape[0], self.shape[1], len, self.shape[3]],
            ..self
        }
    }

    #[inline(always)]
    pub fn row(&self, b: usize, h: usize, r: usize) -> &'a [T] {
        let at = b * self.strides[0] + h * self.strides[1] + r * self.strides[2];
        &self.values[at..at + self.shape[3]]
    }
}

impl<'a> Strided<'a> {
    /// The number of elements from the first to the last one, inclusive: how much of a buffer
    /// starting at the first element the view reads (0 when it is empty).
    // Flex hands over its whole buffer; ndarray and torch give a pointer to the first element.
    #[cfg(any(feature = "ndarray", feature = "tch"))]
    pub fn span(shape: [usize; 4], strides: [usize; 3]) -> usize {
        if shape.contains(&0) {
            return 0;
        }
        (0..3).map(|i| (shape[i] - 1) * strides[i]).sum::<usize>() + shape[3]
    }

    /// The rows of batch row `b`, head `h`.
    pub fn rows_of(&self, b: usize, h: usize) -> HeadRows<'a> {
        let at = b * self.strides[0] + h * self.strides[1];
        HeadRows {
            values: &self.values[at..],
            rows: self.shape[2],
            width: self.shape[3],
            row_stride: self.strides[2],
        }
    }
}

/// The `rows` rows of `width` features of one (batch, head) pair, `row_stride` floats apart.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadRows<'a> {
    values: &'a [f32],
    rows: usize,
    width: usize,
    row_stride: usize,
}

impl<'a> HeadRows<'a> {
    /// Rows `start .. start + n` as a matrix for a `gemm` call, checked to lie in the buffer.
    pub fn matrix(&self, start: usize, n: usize) -> Matrix<'a> {
        assert!(
            n >= 1 && start + n <= self.rows,
            "rows {start}..{} of {}",
            start + n,
            self.rows
        );
        let at = start * self.row_stride;
        Matrix {
            values: &self.values[at..at + (n - 1) * self.row_stride + self.width],
            row_stride: self.row_stride,
        }
    }
}

/// Rows of features (stride 1), `row_stride` floats apart, every element inside `values`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Matrix<'a> {
    values: &'a [f32],
    pub row_stride: usize,
}

impl Matrix<'_> {
    /// The first element; the rest lie inside the borrowed buffer (`HeadRows::matrix`).
    pub fn as_ptr(&self) -> *const f32 {
        self.values.as_ptr()
    }
}

/// A CPU kernel of attention: the output `[batch, heads, q_len, head_dim]` (row-major, the
/// queries' shape) of the queries, keys and values.
pub(crate) type Kernel<'a> = dyn FnOnce(Strided<'_>, Strided<'_>, Strided<'_>) -> Vec<f32> + 'a;

#[cfg(feature = "ndarray")]
mod ndarray_view {
    use std::ops::Range;

    use burn::backend::ndarray::{NdArrayTensor, SharedArray};
    use ndarray::{ArrayView, Axis, IxDyn};

    use super::{Kernel, Strided};

    /// `kernel` over `q` and rows `keys` of `k` and `v`, as an ndarray tensor of `q`'s shape.
    pub(crate) fn run(
        q: NdArrayTensor,
        k: NdArrayTensor,
        v: NdArrayTensor,
        keys: Range<usize>,
        kernel: Box<Kernel<'_>>,
    ) -> NdArrayTensor {
        let (NdArrayTensor::F32(q), NdArrayTensor::F32(k), NdArrayTensor::F32(v)) = (q, k, v)
        else {
            panic!("attention kernels: f32 tensors only (the caller checks)");
        };
        let shape = q.shape().to_vec();
        let (q, k, v) = (q.view(), k.view(), v.view());
        let (first, len) = (keys.start, keys.len());
        let output = with_view(&q, |q| {
            with_view(&k, |k| {
                with_view(&v, |v| kernel(q, k.rows(first, len), v.rows(first, len)))
            })
        });
        NdArrayTensor::from(
            SharedArray::from_shape_vec(shape.as_slice(), output)
                .expect("the output holds exactly its shape's elements"),
        )
    }

    /// `t`'s values when `on` (an option's vector: slopes, sinks, padding).
    pub(crate) fn floats(t: NdArrayTensor, on: bool) -> Option<Vec<f32>> {
        on.then(|| match t {
            NdArrayTensor::F32(t) => t.view().iter().copied().collect(),
            _ => panic!("attention kernels: option vectors are f32 like the queries"),
        })
    }

    /// `f` over the matrix `t` (`[rows, cols]`) as a `[1, 1, rows, cols]` view, copied to
    /// standard layout first if its columns are not adjacent or a stride is negative.
    pub(crate) fn matrix<R>(t: NdArrayTensor, f: impl FnOnce(Strided<'_>) -> R) -> R {
        let NdArrayTensor::F32(t) = t else {
            panic!("CPU kernels: f32 tensors only (the caller checks)");
        };
        let view = t.view().insert_axis(Axis(0)).insert_axis(Axis(0));
        with_view(&view, f)
    }

    /// `f(view)` of `t`'s memory, copied to standard layout first if its features are not
    /// adjacent or a stride is negative.
    fn with_view<R>(t: &ArrayView<'_, f32, IxDyn>, f: impl FnOnce(Strided<'_>) -> R) -> R {
        let shape: [usize; 4] = t.shape().try_into().expect("rank-4 attention inputs");
        if let Some(view) = Strided::new(&[], shape, t.strides(), 0) {
            let span = Strided::span(shape, view.strides);
            // SAFETY: every stride is non-negative (`Strided::new`), so the `span` elements from
            // the first one are the view's and lie inside the memory it borrows, which nothing
            // writes while the borrow lasts.
            #[allow(unsafe_code)]
            let values = unsafe { std::slice::from_raw_parts(t.as_ptr(), span) };
            return f(Strided { values, ..view });
        }
        let standard = t.as_standard_layout();
        let values = standard.as_slice().expect("standard layout is one slice");
        let strides: Vec<isize> = standard.strides().to_vec();
        f(
            Strided::new(values, shape, &strides, 0)
                .expect("standard layout has adjacent features"),
        )
    }
}

#[cfg(feature = "ndarray")]
pub(crate) use ndarray_view::{
    floats as ndarray_floats, matrix as ndarray_matrix, run as on_ndarray,
};

#[cfg(feature = "flex")]
mod flex_view {
    use std::ops::Range;

    use burn::backend::flex::FlexTensor;
    use burn::tensor::{Element, TensorData};
    use bytemuck::Pod;

    use super::{Kernel, Strided};

    /// `kernel` over `q` and rows `keys` of `k` and `v`, as a flex tensor of `q`'s shape.
    pub(crate) fn run(
        q: FlexTensor,
        k: FlexTensor,
        v: FlexTensor,
        keys: Range<usize>,
        kernel: Box<Kernel<'_>>,
    ) -> FlexTensor {
        let shape: [usize; 4] = q.layout().shape().dims::<4>();
        let (q, k, v) = (readable(q), readable(k), readable(v));
        let (first, len) = (keys.start, keys.len());
        let output = kernel(
            view(&q),
            view(&k).rows(first, len),
            view(&v).rows(first, len),
        );
        FlexTensor::from_data(TensorData::new(output, shape))
    }

    /// `t`'s values when `on` (an option's vector: slopes, sinks, padding).
    pub(crate) fn floats(t: FlexTensor, on: bool) -> Option<Vec<f32>> {
        on.then(|| t.to_contiguous().storage::<f32>().to_vec())
    }

    /// `f` over the matrix `t` (`[rows, cols]`, its elements `T`) as a `[1, 1, rows, cols]`
    /// view, copied first if its columns are not adjacent or a stride is negative.
    pub(crate) fn matrix<T: Element + Pod, R>(
        t: FlexTensor,
        f: impl FnOnce(Strided<'_, T>) -> R,
    ) -> R {
        let t = readable(t);
        let layout = t.layout();
        let [rows, cols] = layout.shape().dims::<2>();
        let strides = layout.strides();
        f(Strided::new(
            t.storage::<T>(),
            [1, 1, rows, cols],
            &[0, 0, strides[0], strides[1]],
            layout.start_offset(),
        )
        .expect("made readable"))
    }

    /// `t` where its strides are ones [`Strided`] reads, a contiguous copy otherwise.
    fn readable(t: FlexTensor) -> FlexTensor {
        let layout = t.layout();
        if layout.has_positive_strides() && layout.has_contiguous_inner() {
            t
        } else {
            t.to_contiguous()
        }
    }

    fn view(t: &FlexTensor) -> Strided<'_> {
        let layout = t.layout();
        Strided::new(
            t.storage::<f32>(),
            layout.shape().dims::<4>(),
            layout.strides(),
            layout.start_offset(),
        )
        .expect("made readable")
    }
}

#[cfg(feature = "flex")]
pub(crate) use flex_view::{floats as flex_floats, matrix as flex_matrix, run as on_flex};

#[cfg(feature = "tch")]
mod torch_view {
    #![allow(deprecated)]

    use std::ops::Range;

    use burn::backend::libtorch::TchTensor;
    use tch::{Device, Kind, Tensor};

    use super::{Kernel, Strided};

    /// `kernel` over `q` and rows `keys` of `k` and `v`, as a torch tensor of `q`'s shape.
    pub(crate) fn run(
        q: TchTensor,
        k: TchTensor,
        v: TchTensor,
        keys: Range<usize>,
        kernel: Box<Kernel<'_>>,
    ) -> TchTensor {
        let (q, k, v) = (readable(q.tensor), readable(k.tensor), readable(v.tensor));
        let shape = q.size();
        let (first, len) = (keys.start, keys.len());
        let output = with_view(&q, |q| {
            with_view(&k, |k| {
                with_view(&v, |v| kernel(q, k.rows(first, len), v.rows(first, len)))
            })
        });
        TchTensor::new(Tensor::from_slice(&output).view(shape.as_slice()))
    }

    /// `t`'s values when `on` (an option's vector: slopes, sinks, padding).
    pub(crate) fn floats(t: TchTensor, on: bool) -> Option<Vec<f32>> {
        on.then(|| {
            Vec::<f32>::try_from(t.tensor.to_kind(Kind::Float).contiguous().view(-1))
                .expect("an f32 CPU vector")
        })
    }

    /// `t` itself where its features are adjacent, a contiguous copy otherwise (torch's strides
    /// are never negative).
    fn readable(t: Tensor) -> Tensor {
        assert!(
            t.device() == Device::Cpu && t.kind() == Kind::Float,
            "attention kernels: f32 CPU tensors only (the caller checks)"
        );
        if t.size()[3] <= 1 || t.stride()[3] == 1 {
            t
        } else {
            t.contiguous()
        }
    }

    fn with_view<R>(t: &Tensor, f: impl FnOnce(Strided<'_>) -> R) -> R {
        let shape: [usize; 4] = t
            .size()
            .iter()
            .map(|&n| n as usize)
            .collect::<Vec<_>>()
            .try_into()
            .expect("rank-4 attention inputs");
        let strides: Vec<isize> = t.stride().iter().map(|&s| s as isize).collect();
        let view = Strided::new(&[], shape, &strides, 0).expect("made readable");
        let span = Strided::span(shape, view.strides);
        // SAFETY: `t` is an f32 CPU tensor with non-negative strides (`readable`), so its
        // elements are the `span` values from its first one, inside its storage, which `t`
        // keeps alive during the call; Burn writes a tensor in place only when its handle is
        // the only one, and the caller holds these.
        #[allow(unsafe_code)]
        let values = unsafe { std::slice::from_raw_parts(t.data_ptr() as *const f32, span) };
        f(Strided { values, ..view })
    }
}

#[cfg(feature = "tch")]
pub(crate) use torch_view::{floats as torch_floats, run as on_torch};
