"""The exercises of chapters 0-6 (see :class:`disttutor.checks.exercise.Exercise` for the fields)."""
from __future__ import annotations

from disttutor.checks.exercise import Exercise

EXERCISES: tuple[Exercise, ...] = (
    Exercise("0.1", 0, "your first distributed script, from nothing", "first_job",
             "disttutor.checks.joining:check_first_job", "solutions/ex0_1_first_job.py", (
                 "What must each process learn when it starts, and what in your code would change on 3 ranks?",
                 "torchrun tells each process its number, the job's size and its number on this machine in "
                 "environment variables; the device and backend follow from whether every local process can have "
                 "a GPU of its own. Join with a time limit, let every rank add its number plus one to one sum, "
                 "then leave the group.",
                 "Read `RANK`, `WORLD_SIZE`, `LOCAL_RANK` and `LOCAL_WORLD_SIZE` from `os.environ`; read about "
                 "`torch.cuda.device_count`, the `timeout` argument of `dist.init_process_group` (a "
                 "`datetime.timedelta`), `dist.all_reduce` (in place, a sum by default) and "
                 "`dist.destroy_process_group`. Return the summed tensor."),
             difficulty="core", minutes=30, kind="build"),
    Exercise("1.1", 1, "per-device memory under DDP and ZeRO-1/2/3", "zero_memory",
             "disttutor.checks.memory:check_zero_memory", "solutions/ex1_1_zero_memory.py", (
                 "Compare the calculator's DP and ZeRO bars above: which parts shrink as devices are added, which "
                 "stay whole?",
                 "Each part costs its bytes per parameter times the parameters on every device, unless the stage "
                 "shards it: then each device keeps one world-th of it. The stages are cumulative: each shards one "
                 "more part than the stage before.",
                 "Give each of the three keys the first stage that shards it (the chapter's list of strategies says "
                 "which) and compare it with `stage`; `bytes_per_param` is a dict keyed by the same three names, "
                 "and plain DDP (stage 0) shards nothing."),
             difficulty="warm-up", minutes=15, kind="puzzle"),
    Exercise("1.2", 1, "mean and variance of all ranks' samples, from uneven shards", "global_stats",
             "disttutor.checks.shard_stats:check_global_stats", "solutions/ex1_2_global_stats.py", (
                 "One rank holds 3 samples, another 13: should their two means weigh the same in the mean of all "
                 "16?",
                 "A mean or a variance cannot be added across ranks, but the pieces it is made of can: each rank's "
                 "count, its sum and its sum of squares. Add every piece over all ranks, and each rank finishes the "
                 "same computation on the totals; an empty shard adds zeros.",
                 "Read the documentation of `dist.all_reduce` (its default operation, in place, on every rank) and "
                 "of `torch.cat`: one all-reduce of one tensor can carry all the pieces. Compute on new tensors, "
                 "never on `x_local` itself, and keep the count as a float in that tensor."),
             difficulty="core", minutes=30, kind="build"),
    Exercise("2.1", 2, "ring all-reduce from send/recv", "ring_all_reduce",
             "disttutor.checks.allreduce:check_ring_allreduce", "solutions/ex2_1_ring_allreduce.py", (
                 "Draw the chunk schedule above for 3 ranks: what does rank r send and receive each step, added or "
                 "copied?",
                 "Two phases of n-1 steps each: in the reduce-scatter every rank passes one chunk to its right "
                 "neighbour and adds the one from its left, until each chunk holds everyone's sum on one rank; the "
                 "all-gather passes the finished chunks on, copied. Post each step's send and receive together: two "
                 "blocking sends facing each other wait forever.",
                 "Read about `tensor_split` (uneven and empty chunks), the non-blocking `dist.isend` and "
                 "`dist.irecv` (each returns a request to wait on) and `view` versus `reshape` for a non-contiguous "
                 "input. Receive into a scratch buffer while reducing, straight into the chunk while gathering, "
                 "and keep every helper inside the function."),
             difficulty="core", minutes=40, kind="build", references=("disttutor.scratch.allreduce",)),
    Exercise("2.2", 2, "all-reduce from its two halves: reduce-scatter, then all-gather", "all_reduce_from_halves",
             "disttutor.checks.allreduce:check_halves", "solutions/ex2_2_all_reduce_from_halves.py", (
                 "Which collective of section 3 leaves each rank one finished piece of the sum, and which hands "
                 "everyone every piece?",
                 "The first half leaves rank r with chunk r of the sum; the second copies every rank's finished "
                 "chunk to everyone, in rank order. Both cut a flat buffer into n chunks of one size, so a tensor "
                 "whose length n does not divide needs room added that cannot change a sum, and taken off again.",
                 "Read the documentation of `dist.reduce_scatter_single` and `dist.all_gather_single` (which "
                 "argument is the output, how big each must be) and of `torch.zeros` and `Tensor.copy_` (it "
                 "writes through any strides). Work on a flat buffer of your own and write the result back into "
                 "`tensor`."),
             difficulty="core", minutes=25, kind="build", references=("disttutor.scratch.allreduce",)),
    Exercise("3.1", 3, "bytes through rank 0 versus the ring", "predict_sent",
             "disttutor.checks.traffic:check_predict_sent", "solutions/ex3_1_predict_sent.py", (
                 "Which tensors leave rank 0 in one step of each pattern: only gradients, or parameters and data "
                 "too?",
                 "DataParallel's device 0 copies the whole model to every other device and hands each its slice of "
                 "the input and, after the loss, its slice of the output's gradient. Under DDP's ring rank 0 sends "
                 "only gradient chunks, one per step, in both phases.",
                 "For dp-copy, size one replica and one device's input and output-gradient slices (the batch split "
                 "evenly) and count the devices that receive them. For ddp-ring, list the real `tensor_split` chunk "
                 "sizes and add the ones rank 0 sends in chapter 2's schedule, not the textbook 2(n-1)/n."),
             difficulty="core", minutes=25, kind="puzzle"),
    Exercise("3.2", 3, "a parameter-server step: gradients to rank 0, parameters back", "ps_step",
             "disttutor.checks.param_server:check_ps_step", "solutions/ex3_2_ps_step.py", (
                 "In DataParallel, which device holds the optimizer? Who needs the gradients, and who needs the "
                 "updated parameters?",
                 "Every gradient travels to rank 0, which adds them up; each rank's loss was its own shard's mean, "
                 "so the server turns the sum into the average before its one optimizer step. Then the new "
                 "parameter values travel from rank 0 to every other rank; nobody else steps.",
                 "Read the documentation of `dist.reduce` (its `dst`, the same on every rank; the other ranks keep "
                 "partial sums) and `dist.broadcast` (its `src`). Write down, for one parameter, which rank does "
                 "what and when, then check that every rank calls the same collectives in the same order."),
             difficulty="core", minutes=35, kind="build"),
    Exercise("4.1", 4, "naive DDP: all-reduce every gradient", "sync_gradients",
             "disttutor.checks.ddp:check_naive_ddp", "solutions/ex4_1_naive_ddp.py", (
                 "After backward each `.grad` comes from one rank's shard: what must it become for replicas to step "
                 "like one process?",
                 "The gradient of the mean loss over all ranks is the mean of the ranks' gradients: add them up "
                 "across ranks, then scale by the number of ranks, in place. A parameter this backward did not "
                 "reach (frozen, or unused) has no gradient to add.",
                 "Loop over the model's parameters, skip those without a `.grad`, and read the documentation of "
                 "`dist.all_reduce` (its default operation; it works in place) and `dist.get_world_size`."),
             difficulty="warm-up", minutes=15, kind="build",
             references=("disttutor.scratch.ddp", "disttutor.scratch.accumulate")),
    Exercise("4.2", 4, "bucketed, overlapped DDP", "OverlappedDDP",
             "disttutor.checks.ddp:check_bucketed_ddp", "solutions/ex4_2_bucketed_ddp.py", (
                 "When may a bucket go on the wire, and in what order must every rank launch the buckets?",
                 "Count off each gradient from its bucket (the hook fires once per tensor per backward, a tied "
                 "weight included); when the bucket at `self.next` has none left, flatten its gradients into one "
                 "tensor, start a non-blocking all-reduce on it and keep the handle, then look at the next bucket "
                 "too.",
                 "Read about the `async_op` flag of `dist.all_reduce` and the work it returns, and `torch.cat` of "
                 "reshaped gradients. In `finish()`, launch the buckets that never filled (zeros for missing "
                 "gradients), then wait, average and copy the slices back with `view_as`, and reset the counters."),
             difficulty="stretch", minutes=60, kind="build",
             references=("disttutor.scratch.ddp", "disttutor.scratch.accumulate")),
    Exercise("4.3", 4, "a single-process training script, turned into DDP", "train_ddp",
             "disttutor.checks.ddp_script:check_ddp_script", "solutions/ex4_3_ddp_script.py", (
                 "Which of section 1's numbered lines does a function in a ready process group still need?",
                 "The wrapper makes the replicas equal and averages gradients; the sampler deals each rank its "
                 "share (padded to equal size), reshuffled per epoch only if told the epoch; the task asks for full "
                 "batches, so the last partial one is dropped. A metric over all ranks adds up per-sample sums and counts, each eval sample on one "
                 "rank. One rank writes the file, and everyone waits for it.",
                 "Read about `DistributedSampler` (its `set_epoch`), the `drop_last` flag of `DataLoader`, "
                 "`torch.utils.data.Subset` for a strided eval share, `dist.all_reduce` and `dist.barrier`. Save "
                 "the plain model inside the wrapper, never the wrapper's own state, and return plain floats."),
             difficulty="core", minutes=45, kind="build"),
    Exercise("5.1", 5, "torchrun command for a 2-node job", "node_command",
             "disttutor.checks.cluster:check_node_command", "solutions/ex5_1_node_command.py", (
                 "With c10d the agents number the nodes: must node 1's command differ from node 0's? What must both "
                 "share?",
                 "Every node runs the same command: the job's size (nodes, processes per node), the rendezvous "
                 "backend, one endpoint both can reach (the head's host and port, not each node's own name) and one "
                 "job id shared by all nodes, then the module to run.",
                 "Read `torchrun --help` for `--nnodes`, `--nproc-per-node` and the `--rdzv-*` options; put each "
                 "option in the list as its own string in the option-equals-value form, and end with `-m` and the "
                 "module's name as two strings."),
             difficulty="warm-up", minutes=15, kind="puzzle"),
    Exercise("5.2", 5, "a set-up that works on every node", "join_job",
             "disttutor.checks.joining:check_multinode", "solutions/ex5_2_join_job.py", (
                 "On node 1 of 2 nodes x 2 processes: which of RANK and LOCAL_RANK can name that node's GPU?",
                 "Every node numbers its GPUs from 0, as it numbers its processes (LOCAL_RANK); RANK and "
                 "WORLD_SIZE count the whole job, and GROUP_RANK is the node. The meeting point is the same on "
                 "every node and torchrun hands it to every process, so the script names no host, no port and no "
                 "count of processes.",
                 "Read `RANK`, `LOCAL_RANK`, `WORLD_SIZE` and `GROUP_RANK` from `os.environ`; set the CUDA device "
                 "only where the node has that many GPUs; give `dist.init_process_group` the backend and nothing "
                 "about addresses (its default method is `env://`). Return the five values in a dict."),
             difficulty="core", minutes=30, kind="build"),
    Exercise("6.1", 6, "one pipeline stage over send/recv", "stage_forward_backward",
             "disttutor.checks.model_parallel:check_stage", "solutions/ex6_1_stage_forward_backward.py", (
                 "Follow one batch through 3 stages by hand: what does a middle rank receive, compute and send, "
                 "forward and backward?",
                 "Autograd cannot follow a tensor from one process to another: a received activation is a new leaf, "
                 "so ask for its gradient before running the stage, and after the local backward send that "
                 "gradient to the previous rank. A rank that is not last starts its backward from the gradient its "
                 "successor sends back.",
                 "Read about `dist.send` and `dist.recv` (receive into an empty tensor of `act_shape` or "
                 "`out_shape`), `requires_grad_` and `Tensor.backward` with a gradient argument. Send a detached, "
                 "contiguous output; only the last rank computes `F.mse_loss` and returns it as a float."),
             difficulty="core", minutes=35, kind="build"),
)
