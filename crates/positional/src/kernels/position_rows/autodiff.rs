//! The gradient of adding position rows: `x`'s is the upstream gradient itself; the table's is
//! that summed over the batch, in the rows it was added from and zero elsewhere (what Burn's
//! autodiff of the broadcast add and the `narrow` gives).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, binary};
use burn::backend::{Backend, TensorMetadata, tensor::FloatTensor};
use burn::tensor::{Shape, Slice};

use super::PositionRowsBackend;

#[derive(Debug)]
struct AddPositionRows;

impl<B: Backend + PositionRowsBackend> Backward<B, 2> for AddPositionRows {
    /// The table's shape and device, and the row of the first position.
    type State = (Shape, B::Device, usize);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (table_shape, device, offset) = ops.state;
        binary::<B, _, _>(
            ops.parents,
            ops.node,
            grads,
            |grad| grad,
            |grad| {
                let [_, seq, width] = grad.shape().dims::<3>();
                let rows = B::float_reshape(B::float_sum_dim(grad, 0), Shape::new([seq, width]));
                let zeros = B::float_zeros(table_shape, &device, rows.dtype().into());
                B::float_slice_assign(
                    zeros,
                    &[Slice::from(offset..offset + seq), Slice::from(..)],
                    rows,
                )
            },
        );
    }
}

impl<B: Backend + PositionRowsBackend, C: CheckpointStrategy> PositionRowsBackend
    for Autodiff<B, C>
{
    fn add_position_rows(
        x: FloatTensor<Self>,
        table: FloatTensor<Self>,
        offset: usize,
    ) -> FloatTensor<Self> {
        let nodes = [x.node(), table.node()];
        let (x, table) = (x.into_primitive(), table.into_primitive());
        let state = (table.shape(), table.device(), offset);
        let out = B::add_position_rows(x, table, offset);
        match AddPositionRows
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(state, out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }
}
