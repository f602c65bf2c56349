//! The gradient of the fused rotation: a rotation is orthogonal, so its backward pass is the
//! rotation by minus the same angles, one more call of the same kernel.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn::backend::{Backend, tensor::FloatTensor};

use super::RotaryBackend;

/// The cos/sin tables are computed from the configuration, never learned: the backward pass
/// gives `x` its gradient and the tables none.
#[derive(Debug)]
struct Rotate;

impl<B: Backend + RotaryBackend> Backward<B, 1> for Rotate {
    /// The tables, the row of the first position and the layout, to rotate the gradient back.
    type State = (FloatTensor<B>, FloatTensor<B>, usize, bool, bool);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (cos, sin, table_offset, interleaved, inverse) = ops.state;
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            B::rotate(grad, cos, sin, table_offset, interleaved, !inverse)
        });
    }
}

impl<B: Backend + RotaryBackend, C: CheckpointStrategy> RotaryBackend for Autodiff<B, C> {
    fn rotate(
        x: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        table_offset: usize,
        interleaved: bool,
        inverse: bool,
    ) -> FloatTensor<Self> {
        let node = x.node();
        let (cos, sin) = (cos.into_primitive(), sin.into_primitive());
        let out = B::rotate(
            x.into_primitive(),
            cos.clone(),
            sin.clone(),
            table_offset,
            interleaved,
            inverse,
        );
        match Rotate.prepare::<C>([node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                prep.finish((cos, sin, table_offset, interleaved, inverse), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }
}
