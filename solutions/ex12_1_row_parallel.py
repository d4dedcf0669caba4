"""Exercise 12.1 (chapter 12): the backward of a row-parallel linear layer.

Forward: y = all_reduce(x_shard @ w_shard.T) + bias, with x_shard [tokens, in/t] (my hidden
units), w_shard [out, in/t] (my columns of the weight) and the bias whole.
"""
import torch
import torch.distributed as dist


class RowParallelLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_shard, w_shard, bias):
        ctx.save_for_backward(x_shard, w_shard)
        y = x_shard @ w_shard.T          # my hidden units' share of every output: a partial sum
        dist.all_reduce(y)               # g: add the ranks' shares
        return y + bias                  # the bias once, after the sum

    @staticmethod
    def backward(ctx, grad_y):
        x_shard, w_shard = ctx.saved_tensors
        # grad_y is the gradient of the all-reduced output: the same on every rank (g's backward is
        # the identity), so every gradient below uses only this rank's tensors -- no communication.
        grad_x_shard = grad_y @ w_shard          # [tokens, out] @ [out, in/t]
        grad_w_shard = grad_y.T @ x_shard        # [out, tokens] @ [tokens, in/t]
        grad_bias = grad_y.sum(0)                # the bias was added once to every token's output
        return grad_x_shard, grad_w_shard, grad_bias
