"""The exercises of chapters 7-13 (see :class:`disttutor.checks.exercise.Exercise` for the fields)."""
from __future__ import annotations

from disttutor.checks.exercise import Exercise

EXERCISES: tuple[Exercise, ...] = (
    Exercise("7.1", 7, "the 1F1B order of one rank", "one_f_one_b",
             "disttutor.checks.pipeline:check_one_f_one_b", "solutions/ex7_1_one_f_one_b.py", (
                 "In the 1F1B drawing above: how many forwards precede each rank's first backward? And with fewer "
                 "micro-batches than stages?",
                 "Each rank first fills the pipe below it with forwards (the later the stage, the fewer it needs, "
                 "and never more than there are micro-batches); then it alternates a backward of its oldest micro-"
                 "batch with a forward of the next new one, and drains the remaining backwards.",
                 "Build the list in phases: the warm-up forwards, then the backwards in micro-batch order, each "
                 "followed by the next forward while one is left. Compare your lists for 4 stages and 8 micro-"
                 "batches with the drawing, rank by rank, before running the checker."),
             difficulty="core", minutes=25, kind="puzzle"),
    Exercise("7.2", 7, "the bubble of a measured pipeline run", "bubble_fraction",
             "disttutor.checks.pipeline:check_bubble_fraction", "solutions/ex7_2_bubble_fraction.py", (
                 "Does the pipeline's step start and end once per rank, or once for all ranks? And what counts as "
                 "busy?",
                 "The window is shared by all ranks, from the earliest start to the latest end of any event, since "
                 "the step ends only when the slowest rank is done; the bubble is the part of the p ranks' windows "
                 "that none of their events covers.",
                 "Gather every rank's events into one list, find the window's two ends from the start and end "
                 "fields, add up all the events' durations and compare them with what p ranks could have computed "
                 "in that window. Do not use the (p-1)/(m+p-1) model: the checker feeds measured-looking events."),
             difficulty="warm-up", minutes=15, kind="puzzle"),
    Exercise("7.3", 7, "split a model into PipelineStages and drive Schedule1F1B", "pipeline_step",
             "disttutor.checks.pipeline_stages:check_pipeline_step", "solutions/ex7_3_pipeline_step.py", (
                 "5 blocks on 2 ranks: which blocks does each rank keep? Which rank's `step` gets the batch, "
                 "which the targets?",
                 "Deal the blocks out in order: every rank the same count, the leftover blocks one each to the "
                 "first ranks, each rank's run starting where the previous one ends. The schedule cuts the batch "
                 "into equal micro-batches (check first that it can, on every rank); the loss is a mean per "
                 "micro-batch, and the schedule itself averages the gradients over the micro-batches.",
                 "Read about `divmod`, slicing an `nn.Sequential` (the slice shares the parameters), "
                 "`PipelineStage`'s arguments and `Schedule1F1B` with `loss_fn`, then its `step`: the input as a "
                 "positional argument, the `target` and `losses` keywords on the last stage. Raise a `ValueError` before "
                 "building anything when the rows do not divide; return the piece and the losses' list."),
             difficulty="stretch", minutes=40, kind="build"),
    Exercise("8.1", 8, "no_sync() for the from-scratch bucketed DDP", "NoSyncDDP",
             "disttutor.checks.perf:check_no_sync", "solutions/ex8_1_no_sync.py",
             (
                 "What must differ in a backward inside `no_sync()`, and which code decides it: the context manager "
                 "or the per-gradient callback?",
                 "The context manager only flips a flag on entry and puts its old value back on exit, even when the "
                 "body raises. While the flag says 'no sync' the per-gradient callback does nothing, so `.grad` "
                 "keeps adding up and the next backward outside reduces the whole sum.",
                 "Read about `contextlib.contextmanager` (code before `yield` runs on entry, a `finally` after it "
                 "on exit). Give the wrapper its flag (default: sync) and, in `_grad_ready`, hand over to the "
                 "parent class's method only when syncing."),
             difficulty="core", minutes=20, kind="build", references=("disttutor.scratch.accumulate",)),
    Exercise("8.2", 8, "gradient accumulation with torch's DDP and no_sync()", "accumulate_train",
             "disttutor.checks.accumulation:check_accumulate_train", "solutions/ex8_2_accumulate.py",
             (
                 "8 micro-batches in groups of 3: how many steps and all-reduces? How many micro-batches does the "
                 "last group average?",
                 "Each optimizer step must see the gradient of the mean loss over what its group holds, added up in "
                 ".grad by the group's backwards. DDP all-reduces in every backward unless told not to; the one "
                 "backward that must communicate is the one after which the optimizer reads .grad, and DDP "
                 "decides that at the forward.",
                 "Read the documentation of DDP's `no_sync` (which steps it must enclose). Think group by "
                 "group, not micro-batch by micro-batch: the group's own size is what its losses share, and the "
                 "gradients are cleared once per group so that nothing of one group reaches the next."),
             difficulty="core", minutes=30, kind="build"),
    Exercise("8.3", 8, "a gradient-compression communication hook", "fp16_compress_hook",
             "disttutor.checks.perf:check_compress_hook", "solutions/ex8_3_compress_hook.py",
             (
                 "What does DDP hand the hook, what must it return, and when are the numbers ready? Where could "
                 "fp16 overflow?",
                 "Compress the bucket's fp32 buffer to fp16 and divide it by the world size before the sum: n "
                 "gradients added may overflow fp16, n already divided ones do not. Start the all-reduce without "
                 "waiting and attach a callback that, once it is done, writes the result back into the fp32 buffer "
                 "and returns that buffer.",
                 "Read about `bucket.buffer()`, the `async_op` flag of `dist.all_reduce` with its work's "
                 "`get_future()`, and `torch.futures.Future.then` (the callback gets the future; its `value()` is a "
                 "list of tensors). Return the future that `then` gives back."),
             difficulty="core", minutes=25, kind="build"),
    Exercise("9.1", 9, "find the straggler from the profiler's traces", "find_straggler",
             "disttutor.checks.profiling:check_straggler", "solutions/ex9_1_find_straggler.py",
             (
                 "Sum each rank's time per `user_annotation` region: where does a rank stand out by its own work, "
                 "where by waiting?",
                 "In DDP the backward holds the gradient all-reduce, which cannot finish before every rank arrives: "
                 "fast ranks spend the slow rank's extra time waiting inside their backward. The slow rank's own "
                 "delay shows in work that happens before any communication.",
                 "For each rank, keep the events whose category is `user_annotation` and whose name is the forward "
                 "region, add up their `dur`, and return the rank with the largest total; the checker relabels the "
                 "ranks, so a fixed answer fails."),
             difficulty="warm-up", minutes=15, kind="puzzle"),
    Exercise("9.2", 9, "fix the bug: gradient accumulation under DDP", "accumulate_step",
             "disttutor.checks.fixbug:check_accumulation", "solutions/ex9_2_accumulate_step.py", (
                 "Two silent bugs: is the sum of several backward() calls the mean loss's gradient? How often does "
                 "DDP all-reduce?",
                 "Scale each micro-batch's loss so that the accumulated gradient is the gradient of the mean over "
                 "the micro-batches. Only the last backward should communicate: inside DDP's `no_sync()` a backward "
                 "only adds up locally, and the next backward outside it all-reduces the sum once.",
                 "Read the documentation of DDP's `no_sync`. Run every micro-batch but the last inside it, and the "
                 "last one outside (`contextlib.nullcontext` is a do-nothing context, so one `with` statement "
                 "serves both); scale the losses as hint 2 says."),
             broken="disttutor/checks/broken/ex9_2_accumulate_step.py",
             difficulty="core", minutes=20, kind="fix"),
    Exercise("9.3", 9, "fix the bug: set_epoch and a global loss log", "train_epochs",
             "disttutor.checks.fixbug:check_epochs", "solutions/ex9_3_train_epochs.py", (
                 "Two silent bugs: is epoch 1's order new? Whose loss does `loss.item()` return on rank 1?",
                 "The sampler derives its shuffle from its seed and the epoch it has been told, so it must be told "
                 "each epoch. A rank's loss is its own shard's mean; the global mean needs a collective, called on "
                 "every rank: one that only rank 0 calls waits forever.",
                 "Read `DistributedSampler.set_epoch` and `dist.all_reduce` (it sums in place): reduce a detached "
                 "copy of the loss, not the tensor autograd holds, on every rank, then divide by the world size "
                 "before logging."),
             broken="disttutor/checks/broken/ex9_3_train_epochs.py",
             difficulty="core", minutes=20, kind="fix"),
    Exercise("10.1", 10, "resume a training job from its checkpoint", "resume",
             "disttutor.checks.resume:check_resume", "solutions/ex10_1_resume.py",
             (
                 "What does the next step read that a fresh model and optimizer lack? Read `checkpoint.save`: where "
                 "does each piece go?",
                 "A checkpoint is a directory: the tensors (weights, AdamW's moments) written by DCP under the "
                 "nested keys `save` chose, everything else as JSON in `meta.json`, one RNG file per rank. DCP "
                 "loads into tensors of the right shapes that you hand it, and JSON has turned tuples such as "
                 "AdamW's `betas` into lists.",
                 "Find the newest complete checkpoint (none: step 0), read its metadata, get state dicts from "
                 "`get_state_dict`, fill them with `dcp.load` through `checkpoint.SafeReader`, restore them with "
                 "`set_state_dict` (param groups from the metadata), then the scheduler, and last this rank's CPU "
                 "RNG state; return the saved step."),
             difficulty="stretch", minutes=45, kind="build"),
    Exercise("10.2", 10, "the DDP language model's training step", "train_step",
             "disttutor.checks.lm_step:check_train_step", "solutions/ex10_2_train_step.py", (
                 "Which backward passes must talk to the other ranks, and are the gradients true or scaled when "
                 "you clip?",
                 "Clear the gradients once per step. Inside DDP's `no_sync()` a backward only adds to `.grad`; the "
                 "next backward outside it all-reduces the sum once. Scale each loss so the sum is the gradient of "
                 "the mean. The scaler multiplied the loss: undo that before measuring the norm, and move the "
                 "schedule only after the optimizer has stepped.",
                 "Read DDP's `no_sync`, `contextlib.nullcontext`, `GradScaler`'s `scale`, `unscale_`, `step` and "
                 "`update` (its documentation shows where clipping goes), `torch.nn.utils.clip_grad_norm_` and "
                 "`LRScheduler.step`. Return the mean of the micro-batches' losses."),
             difficulty="core", minutes=45, kind="build"),
    Exercise("11.1", 11, "ZeRO-1: shard the optimiser state", "ZeroOne",
             "disttutor.checks.sharding:check_zero1", "solutions/ex11_1_zero1.py", (
                 "Which rank keeps a parameter's optimizer state, agreed without talking? And how do the others get "
                 "its updated values?",
                 "Give every trainable parameter exactly one owner, by a rule each rank computes identically from "
                 "the same list (a tied weight counted once, frozen ones owned by nobody). The inner optimizer "
                 "steps only this rank's parameters; then every parameter travels from its owner to all ranks.",
                 "Read `torch.optim.Optimizer`'s constructor (hand it every parameter) and `dist.broadcast` (its "
                 "`src`). Build `self.optim` with `optimizer_class` on your share (a rank that owns nothing still "
                 "needs a valid one); in `step()`, step it, then broadcast every parameter in the same order on "
                 "every rank."),
             difficulty="core", minutes=40, kind="build", references=("disttutor.scratch.zero1",)),
    Exercise("11.2", 11, "FSDP: sharded parameters, all-gather, reduce-scatter", "FSDP",
             "disttutor.checks.sharding:check_fsdp", "solutions/ex11_2_fsdp.py", (
                 "For each method: afterwards, where is the memory, which tensor does the optimizer see, in which "
                 "dtype and order?",
                 "`free` has two jobs: the full copies stop being trainable, and they give up their storage. "
                 "`gather` lays every rank's shard, in rank order, into one vector in the compute dtype; "
                 "`reduce_scatter` sums the full gradient over ranks, keeps this rank's slice and makes it the "
                 "average, in fp32.",
                 "Read about `requires_grad_`, replacing a tensor's `.data` by an empty one, `new_empty`, and "
                 "`dist.all_gather_single` / `dist.reduce_scatter_single` (older names: `all_gather_into_tensor`, "
                 "`reduce_scatter_tensor`): you allocate the output, world times the shard for the gather, a world-"
                 "th of the gradient for the scatter."),
             difficulty="core", minutes=30, kind="build", references=("disttutor.scratch.fsdp",)),
    Exercise("11.3", 11, "HSDP: replicate x shard on a 2-D device mesh with FSDP2", "hsdp_train",
             "disttutor.checks.hsdp:check_hsdp", "solutions/ex11_3_hsdp.py", (
                 "In the chapter's FSDP2 script, which one object changes when ranks form replicas of shard "
                 "groups?",
                 "The mesh gets two named dims, replicas first: fully_shard replicates over its first dim and "
                 "shards over its second, so each parameter's rows split only within a shard group of neighbouring "
                 "ranks and every replica holds the same shards. The rest (a unit per block, the root last, the "
                 "optimizer after sharding, an unchanged loop) is the script's.",
                 "Read `init_device_mesh` (a shape tuple and `mesh_dim_names`; the device type comes from the "
                 "model's parameters) and the `mesh` argument of `fully_shard`. Build the shape from `replicas` "
                 "and `shards`, never from fixed numbers; then wrap, build SGD with `lr`, and take one step per "
                 "batch."),
             difficulty="core", minutes=40, kind="build", references=("disttutor.programs.fsdp2",)),
    Exercise("12.1", 12, "the row-parallel linear's backward", "RowParallelLinear",
             "disttutor.checks.tensor_parallel:check_row_parallel", "solutions/ex12_1_row_parallel.py", (
                 "Is `grad_y` equal on every rank (what did the forward's all-reduce do)? Then does backward need "
                 "another rank's data?",
                 "The all-reduce's backward is the identity, so each gradient comes from this rank's own tensors, "
                 "with no communication: the local linear layer's gradient, shaped like its tensor. The bias was "
                 "added once to every token's output after the sum, so its gradient is whole and not divided.",
                 "Write down the shapes (`grad_y` [tokens, out], `x_shard` [tokens, in/t], `w_shard` [out, in/t]) "
                 "and find for each gradient the one matrix product, transposed where needed, or the sum over "
                 "tokens whose shape matches; return the three in the forward's argument order."),
             difficulty="warm-up", minutes=10, kind="puzzle"),
    Exercise("12.2", 12, "sequence parallelism's all-gather and its backward", "GatherSeq",
             "disttutor.checks.sequence_parallel:check_gather_seq", "solutions/ex12_2_gather_seq.py", (
                 "Which ranks' column-parallel layers used my rows, and how do their gradients for those rows "
                 "combine?",
                 "Forward lays the ranks' shards one after another along the sequence dimension, in rank order. "
                 "In backward each rank holds a gradient for the whole sequence, from its own hidden units; my "
                 "rows' gradient is the sum of every rank's gradient for those rows: summed across the ranks and "
                 "split by rows in one collective, neither averaged nor only sliced.",
                 "Read about `dist.all_gather_single` and `dist.reduce_scatter_single` (older names "
                 "`all_gather_into_tensor`, `reduce_scatter_tensor`): you allocate the output with `new_empty`, "
                 "world times the shard's rows for the gather, a world-th of the gradient's rows for the "
                 "scatter. Hand the collectives contiguous tensors: autograd may pass backward a transposed or "
                 "expanded gradient."),
             difficulty="core", minutes=30, kind="build", references=("disttutor.tensor_parallel.sp",)),
    Exercise("12.3", 12, "the online-softmax merge of ring attention", "merge",
             "disttutor.checks.tensor_parallel:check_merge", "solutions/ex12_3_online_softmax_merge.py", (
                 "Each block's output is normalised by its own softmax denominator: what should the merged "
                 "denominator be, and each block's share?",
                 "The merged denominator is the sum of the blocks' denominators: each block's output is weighted by "
                 "its share of that sum, and the merged lse is the log of the sum. Stay in log space: "
                 "exponentiating the lse values themselves overflows.",
                 "Read about `torch.logaddexp`; write each block's share as an exponential of a difference of log-"
                 "sum-exps, broadcast over the last dimension. Where the merged lse is minus infinity (both blocks "
                 "saw no key), use 0 as the reference in the exponents, or infinity minus infinity gives nan."),
             difficulty="core", minutes=20, kind="puzzle"),
    Exercise("13.1", 13, "predict a DDP step from the fitted constants", "ddp_step",
             "disttutor.checks.cost_model:check_ddp_step", "solutions/ex13_1_ddp_step.py", (
                 "What does one step spend its time on? With one bucket, when can the all-reduce start?",
                 "Compute is every linear layer's multiply-adds over this rank's rows, forward and the two "
                 "matmuls of backward, at the fitted matmul rate. Communication is one all-reduce of every "
                 "gradient's bytes: one call's fitted latency plus the bytes a rank moves in chapter 2's ring, "
                 "at the fitted bus bandwidth.",
                 "Walk `model.modules()` for `nn.Linear` layers (`in_features`, `out_features`), count the "
                 "bytes of `model.parameters()` in float32, read `alpha` and `bandwidth` from the all-reduce's "
                 "entry of `machine.links`, use `machine.gamma` and `machine.n`, and return seconds."),
             difficulty="core", minutes=30, kind="build", references=("disttutor.scale.local",)),
    Exercise("13.2", 13, "time a collective the way scale_bench does", "bench_all_reduce",
             "disttutor.checks.bench:check_bench", "solutions/ex13_2_bench_all_reduce.py", (
                 "When is a collective done, on which rank's clock? What do the first calls pay for?",
                 "Warm up with untimed calls; before each timed call bring every rank to the same point, then "
                 "read the clock on every rank around the call alone. Per call keep the slowest rank's time, "
                 "shared so every rank holds it, and summarise the calls by a statistic one outlier cannot move.",
                 "Read about `dist.barrier`, `time.perf_counter`, `dist.all_reduce` with the `MAX` reduce op "
                 "on a tensor of this rank's times, and `statistics.median`; return seconds, the same number on "
                 "every rank."),
             difficulty="core", minutes=30, kind="build", references=("disttutor.programs.scale_bench",)),
)
