# %% [markdown] id="md-06-01"
# # Chapter 6 — Model parallelism, and the RPC framework
#
# Data parallelism (chapters 3–5) copies the whole model onto every device. **Model parallelism**
# splits it instead: different layers live on different devices, and the activations flow from one
# to the next (the article's §6):
#
# ```
#  input ──▶ [device 0: layers 0-3] ──▶ [device 1: layers 4-7] ──▶ loss
#            ◀── gradient ─────────────◀── gradient ─────────────────┘
# ```
#
# You will split a model three ways: in one process with `.to(device)`, over processes with
# `send`/`recv`, and over RPC workers, the article's way, trained.

# %% tags=["chapter-header"]
import disttutor.course.chapters
from disttutor.course.problems import problem  # worked problems
from disttutor.course.puzzles import puzzle  # puzzles, one a cell
from disttutor.course.shape import answer, card, hint, reveal  # exercise cards, hints, answers, predictions

disttutor.course.chapters.header(6)

# %% [markdown] id="md-06-02" tags=["opening"]
# **After this chapter you can**
# * split a model over two devices in one process with `.to(device)`, and measure what each device holds;
# * split it over ranks with `dist.send`/`dist.recv`: activations forward, gradients back;
# * train a model over RPC with distributed autograd and the distributed optimizer, and say when RPC is the right tool.

# %% [markdown] id="md-06-03"
# ## 1. One process, two devices: `.to(device)`
#
# The simplest split needs no `torch.distributed` at all: put each part of the model on its device and
# move the activation between them in `forward`. Autograd follows the `.to()` back, so one ordinary
# optimizer trains both parts. Eight `Linear` layers (width 256, 4 outputs), four on each device:

# %%
import torch
import torch.nn.functional as F
from torch import nn

two_gpus = torch.cuda.device_count() >= 2
dev0, dev1 = (torch.device("cuda:0"), torch.device("cuda:1")) if two_gpus else (torch.device("cpu"),) * 2


class TwoDeviceMLP(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.part0 = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(256, 256), nn.ReLU())]).to(dev0)
        self.part1 = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                                   nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4)).to(dev1)

    def forward(self, x):
        h = self.part0(x.to(dev0))
        return self.part1(h.to(dev1))        # the activation crosses; autograd sends its gradient back


model = TwoDeviceMLP()
opt = torch.optim.SGD(model.parameters(), lr=0.05)   # one optimizer, parameters on both devices
g = torch.Generator().manual_seed(1)
x, y = torch.randn(256, 256, generator=g), torch.randn(256, 4, generator=g)
for step in range(5):
    opt.zero_grad()
    loss = F.mse_loss(model(x), y.to(dev1))
    loss.backward()
    opt.step()

held = [sum(p.numel() for p in part.parameters()) for part in (model.part0, model.part1)]
print(f"devices: {dev0}, {dev1}" + ("" if two_gpus else " (no two GPUs here: both parts on the CPU, the copy is a no-op)"))
print(f"parameters: part0 {held[0]} ({held[0] / sum(held):.1%}), part1 {held[1]} ({held[1] / sum(held):.1%})")
print(f"crossing per step: {x.shape[0] * 256 * 4} bytes of activation forward, as many of gradient back")
print(f"loss after 5 steps: {loss.item():.4f}")

# %% [markdown] id="md-06-04"
# Half the layers is not half the weights: the last layer is 256×4, so part 0 holds the share printed
# above. The split saves memory on each device; it gains no time, because part 1 waits for part 0's
# activation and part 0 waits for part 1's gradient, so one device works at a time. The proof trains
# the unsplit model the same way and compares the parameters.

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch06 import check_one_process_split

init = TwoDeviceMLP().cpu()  # the same seed: the split model's starting weights
whole = nn.Sequential(*init.part0, *init.part1)
opt_w = torch.optim.SGD(whole.parameters(), lr=0.05)
for step in range(5):
    opt_w.zero_grad()
    F.mse_loss(whole(x), y).backward()
    opt_w.step()
print(check_one_process_split([p.detach() for p in model.parameters()], [p.detach() for p in whole.parameters()],
                              same_device=not two_gpus))

# %% [markdown] id="md-06-05"
# ## 2. Across processes: `send` and `recv`
#
# When the parts live in different processes, autograd cannot follow a tensor from one to the other.
# So the sender sends the activation's values; the receiver makes its copy a **leaf** with
# `requires_grad_(True)`, and after `backward()` that leaf's `.grad` is ∂loss/∂(activation), which it
# sends back; the sender continues with `h.backward(grad)`. A receiver allocates its buffer before the
# bytes arrive, so it must know the shape. Two live ranks (`%%ranks`, chapter 0), one layer each:

# %%
%load_ext disttutor
%ranks start -n 2

# %%
%%ranks
g = torch.Generator().manual_seed(1)                 # both ranks draw the same batch
x, y = torch.randn(64, 256, generator=g), torch.randn(64, 4, generator=g)
torch.manual_seed(rank)
stage = nn.Linear(256, 256) if rank == 0 else nn.Linear(256, 4)

if rank == 0:
    h = stage(x)
    dist.send(h.detach(), dst=1)                     # forward: only the values travel
    grad_h = torch.empty_like(h)
    dist.recv(grad_h, src=1)                         # d loss / d h, computed on rank 1
    h.backward(grad_h)                               # continue the chain rule where rank 1 stopped
else:
    h = torch.empty(64, 256)                         # the shape is known in advance
    dist.recv(h, src=0)
    h.requires_grad_(True)                           # a leaf: backward leaves d loss / d h in h.grad
    loss = nn.functional.mse_loss(stage(h), y)
    loss.backward()
    dist.send(h.grad, dst=0)
    print(f"loss {loss.item():.4f}")
print(f"my layer's weight got a gradient: {stage.weight.grad is not None}")

# %%
%ranks stop

# %% [markdown] id="md-06-06"
# The course's program `model_parallel` does the same with the 8-layer model, four layers per rank, five
# full-batch steps, and records when each rank computes and when it waits (its `train_step` is the
# pattern above: `disttutor/programs/model_parallel.py`).

# %% [markdown] id="md-06-26" tags=["derivation"]
# **Derivation** ($p$ equal stages; one stage's forward of the whole batch takes $t_f$, its backward $t_b$; sends take no time):
#
# * plain model parallelism: a step lasts $p\,(t_f+t_b)$, of which each stage computes $t_f+t_b$: a busy share $u = 1/p$;
# * $m$ micro-batches (GPipe): a piece takes $(t_f+t_b)/m$; filling and draining the pipeline idles each stage
#   for $p-1$ pieces, so a step lasts $(m+p-1)(t_f+t_b)/m$ and $u = m/(m+p-1)$;
# * bytes: each of the $p-1$ boundaries carries the activation ($b \times w$ float32 numbers) forward and its
#   gradient back, $S = 2(p-1) \cdot 4bw$ bytes a step for any $m$, in $2(p-1)m$ messages that keep the links
#   busy $2(p-1)m\,\alpha + S/B$ seconds.

# %%
import disttutor
from disttutor.programs import model_parallel as mp_prog

MP = mp_prog.MPConfig(steps=5, warmup=1, batch=256, width=256, layers_per_stage=4, lr=0.05)
mp_run = disttutor.launch("model_parallel", nproc=2, args={k: v for k, v in MP.__dict__.items() if k != "report_params"},
                          timeout=120, collective_timeout=60, stream=False)
print(mp_run.command)
print("parameters per rank:", [res["n_params"] for res in mp_run.results])

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch06 import check_split_model

ref_model, ref_losses = mp_prog.reference(MP, 2)
rows = []
for r, res in enumerate(mp_run.results):
    flat = torch.cat([p.detach().reshape(-1).double()
                      for p in mp_prog.stage_of(ref_model, r, 2, MP.layers_per_stage).parameters()])
    # same float32 ops, same order: differences are rounding in the sums, far below 1e-6 relative
    same = (abs(res["param_sum"] - flat.sum().item()) <= 1e-6 * flat.abs().sum().item()
            and abs(res["param_abs_sum"] - flat.abs().sum().item()) <= 1e-6 * flat.abs().sum().item())
    rows.append({"rank": r, "matches reference": same})
print(check_split_model(rows, mp_run.results[-1]["losses"], ref_losses))  # only the last rank sees the loss

# %% tags=["schematic"]
import matplotlib.pyplot as plt

from disttutor.viz.microbatch_schematic import plot_microbatch_schematic, stage_times

t_f, t_b = stage_times(mp_run.results)  # the run's mean forward and backward of one stage, per step
plot_microbatch_schematic(stages=len(mp_run.results), micro_batches=4,  # what if the batch were cut in 4?
                          batch=MP.batch, width=MP.width, fwd_s=t_f, bwd_s=t_b)
plt.show()

# %% [markdown] id="md-06-27" tags=["caption"]
# *Figure: the derivation drawn with the run's stages, batch and mean stage times: plain, one stage computes at a time; with four micro-batches the stages overlap and the step shortens.*

# %%
from disttutor.viz.model_parallel import plot_timeline

plot_timeline(mp_run.results)
plt.show()
busy = [r["compute_s"] / r["wall_s"] for r in mp_run.results]
print("compute share of the step: " + ", ".join(f"rank {r} {u:.0%}" for r, u in enumerate(busy))
      + f"; the rule's 1/p = {1 / len(busy):.0%}")

# %% [markdown] id="md-06-28" tags=["caption"]
# *Figure: the run measured on one time axis: blue forward, orange backward, green the optimizer step, grey waiting in recv or send; blue and orange blocks of different ranks never overlap.*

# %% [markdown] id="md-06-07"
# Forward blocks go down the ranks, backward blocks come back up: **one rank computes at a time**, the
# other waits in `recv` (grey). With N stages each device computes at most about 1/N of a step. The
# proof below measures that no two ranks' compute overlapped. **Pipeline parallelism** (chapter 7) cuts
# the batch into micro-batches so that the stages work at once.

# %% tags=["proof"]
from disttutor.checks.claims.ch06 import check_one_rank_at_a_time
from disttutor.pipeline.timeline import compute_overlap_s

window = max(r["t0"] + r["wall_s"] for r in mp_run.results) - min(r["t0"] for r in mp_run.results)
print(check_one_rank_at_a_time(compute_overlap_s(mp_run.results), mp_run.results, window))

# %% [markdown] id="md-06-09"
# ### Exercise 6.1 — one stage's forward and backward over send/recv
#
# Write `stage_forward_backward(stage, x, y, act_shape, out_shape)`, run on every rank, with only
# `dist.send`/`dist.recv`: the pattern of the live cell above, for any number of stages. Rank 0 reads
# `x`, the others receive their input (`act_shape`); all but the last send their output on and wait
# for its gradient (`out_shape`); the last returns `F.mse_loss(out, y)` as a float (the others `None`);
# all but the first send their input's gradient back. The checker trains 3 stages on 3 real ranks and
# compares every layer with the same model trained in one process.

# %%
card("6.1")

# %%
def stage_forward_backward(stage, x, y, act_shape, out_shape):
    """Exercise 6.1: forward and backward of this rank's stage; the loss on the last rank, else None."""
    raise NotImplementedError("Exercise 6.1: recv input, forward, send output; recv grad, backward, send grad")


# %%
hint("6.1")


# %%
from disttutor.checks.model_parallel import check_stage

print(check_stage(stage_forward_backward))

# %% [markdown] id="md-06-10"
# ## 3. Over RPC: a master calls the workers
#
# `torch.distributed.rpc` is another layer of PyTorch: instead of symmetric ranks exchanging messages,
# a **master** calls functions on named **workers**. `rpc.remote(to, fn)` runs `fn` on worker `to` and
# returns an `RRef` (remote reference) to the result, which stays there; `rref.rpc_sync().method(x)`
# calls a method of that object and returns the value. The article's shape, corrected: a master and
# worker1..3, each worker holding one stage (embedding, transformer, classifier). The master's model:

# %%
import inspect

from disttutor.programs import rpc_train

print(inspect.getsource(rpc_train.RemoteStages.__init__))
print(inspect.getsource(rpc_train.RemoteStages.forward))

# %% [markdown] id="md-06-11"
# Local autograd stops at an RPC, so training needs two more pieces. Inside
# `with dist_autograd.context() as ctx_id:` every RPC that carries a tensor requiring grad is recorded
# in a graph spanning the workers; `dist_autograd.backward(ctx_id, [loss])` runs backward through all of
# it, keeping the gradients in the context on the worker that owns each parameter (not in `.grad`).
# `DistributedOptimizer(optim.SGD, param_rrefs, lr=...)` takes an `RRef` to every parameter, builds an
# optimizer on each worker that owns some, and `opt.step(ctx_id)` updates each where it lives. The master's loop, from the program:
#
# ```python
# opt = DistributedOptimizer(optim.SGD, model.parameter_rrefs(), lr=cfg.lr)
# for step in range(cfg.steps):
#     with dist_autograd.context() as ctx_id:
#         loss = loss_fn(model.forward(x), y)
#         dist_autograd.backward(ctx_id, [loss])  # not loss.backward(): that stops at the first RPC
#         opt.step(ctx_id)                        # each worker applies SGD to its own parameters
# ```
#
# Eight sequences of 12 tokens, the target of each token `token % 10`, five SGD steps, four processes:

# %% tags=["proof", "nbval-check-output"]
taught = "\n".join(ln.strip() for ln in inspect.getsource(rpc_train.train_master).splitlines())
for line in ("opt = DistributedOptimizer(optim.SGD, model.parameter_rrefs(), lr=cfg.lr)",
             "dist_autograd.backward(ctx_id, [loss])  # not loss.backward(): that stops at the first RPC",
             "opt.step(ctx_id)                        # each worker applies SGD to its own parameters"):
    assert line in taught, f"the loop shown above is no longer rpc_train.py's: {line!r}"
print("✓ the loop above is the one rpc_train.py runs, line for line")

# %%
RT = rpc_train.RpcTrainConfig()
trained = disttutor.launch("rpc_train", nproc=4, timeout=120, stream=False)
print(trained.command)
print("\n".join(ln for ln in trained.ranks[0].log if "loss" in ln))

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch06 import check_rpc_training

ref_losses_rpc, ref_params = rpc_train.reference(RT)
rows = []
for i in range(3):
    w = trained.results[i + 1]
    got, want = torch.tensor(w["params"]), torch.tensor(ref_params[i])
    # dist-autograd sums gradients in its own order and the distributed optimizer runs the
    # TorchScript functional SGD: float32 rounding differs by ~1e-7, so 1e-5 relative
    rows.append({"worker": f"worker{i + 1}", "changed": w["changed"], ".grad stayed None": w["grad_attr_none"],
                 "matches reference": torch.allclose(got, want, rtol=1e-5, atol=1e-6)})
losses_match = torch.allclose(torch.tensor(trained.results[0]["losses"]), torch.tensor(ref_losses_rpc), rtol=1e-5)
print(check_rpc_training(rows, losses_match, ref_losses_rpc))

# %% [markdown] id="md-06-12"
# Each worker's stage changed and equals the same stage trained in one process, to float32 rounding.
# The topology is a star: each `rpc_sync` returns the activation to the master, which sends it to the
# next worker, and one worker computes at a time, as in section 2.
#
# <details><summary><b>The article says</b> <code>x_emb = self.embed_rref.remote().forward(x)</code>, and passes <code>x_emb</code> on</summary>
#
# Today `.remote()` returns an `RRef`, not a tensor: the next stage gets a reference it cannot compute
# with, and the master's `to_here()` raises the `TypeError` the proof shows. `rpc_sync()` returns the tensor.
# </details>

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch06 import check_article_rpc_fails

art = disttutor.launch("rpc_article", nproc=4, args={"stage": "as-written"}, stream=False, timeout=120, check=False)
print(check_article_rpc_fails(art))

# %% [markdown] id="md-06-13"
# <details><summary><b>The article says</b> <code>nn.Transformer(d_model=1000, nhead=10)</code> on a <code>(32, 50)</code> batch</summary>
#
# Today, as before, `nn.Transformer` reads `(seq, batch, d)` unless `batch_first=True`: the 32 sequences
# become the 32 positions, their 50 tokens the batch, and attention mixes samples. The shape is the same either way,
# so nothing fails; the proof changes sample 1 and looks at sample 0's output.
# </details>

# %% tags=["proof", "nbval-check-output"]
import warnings


def sample0_changes(batch_first: bool) -> bool:
    torch.manual_seed(0)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nn.Transformer's nested-tensor notice
        t = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                           dim_feedforward=32, dropout=0.0, batch_first=batch_first).eval()
        x = torch.randn(32, 50, 16)          # (batch, seq, d) as the article builds it
        x2 = x.clone()
        x2[1] += 1.0                         # change sample 1 only
        return not torch.allclose(t(x, x)[0], t(x2, x2)[0])


leaks = {False: sample0_changes(False), True: sample0_changes(True)}
assert leaks == {False: True, True: False}, leaks
print("✓ sample 0's output depends on sample 1 with the default layout, not with batch_first=True")

# %% [markdown] id="md-06-14"
# <details><summary><b>The article says</b> nothing about training the RPC model</summary>
#
# Today `loss.backward()` on the master stops at the first RPC without an error, and no worker's
# parameter gets a gradient. The master's model holds no parameter of its own, so a local
# `optim.SGD(model.parameters())` raises at once. Training needs `dist_autograd` and
# `DistributedOptimizer`, as above; the proof runs the article's model with its calls fixed.
# </details>

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch06 import check_no_remote_grads

fixed = disttutor.launch("rpc_article", nproc=4, args={"stage": "fixed-calls", "batch": 8, "seq": 10},
                         stream=False, timeout=120)
try:
    torch.optim.SGD([], lr=0.1)  # what optim.SGD(model.parameters()) gets on the master: no parameter
    empty = "no error"
except ValueError as e:
    empty = str(e)
print(check_no_remote_grads(fixed.results[0], shape=[8, 10, 10], empty_error=empty))  # 8 x 10 tokens, 10 classes

# %% [markdown] id="md-06-15"
# ## 4. When to use which
#
# > **The RPC framework today.** `torch.distributed.rpc`, `dist_autograd` and `DistributedOptimizer`
# > ship with this torch and work, as trained above, but the run warns of its own deprecations: RPC's
# > start-up calls an API deprecated since PyTorch 2.0, and the distributed optimizer is built on
# > TorchScript, deprecated in favour of `torch.compile` (the proof below reads the warnings). New
# > model-parallel features are built elsewhere.
# >
# > | you need | use | chapter |
# > |---|---|---|
# > | a few layers over a few local GPUs, a quick experiment | `.to(device)` in one process (section 1) | 6 |
# > | a model deeper than one device holds, with the devices kept busy | `torch.distributed.pipelining` (GPipe, 1F1B) | 7 |
# > | parameters and optimizer state that do not fit, at data-parallel speed | FSDP2 (`fully_shard`) | [11](11_beyond_ddp.ipynb) |
# > | single layers too large for one device | tensor parallelism on `DTensor` | [12](12_tensor_sequence_expert.ipynb) |
# > | irregular programs that call objects living elsewhere: a parameter server, RL actors feeding a learner | RPC (pin your torch version) | 6 |

# %% tags=["proof", "nbval-check-output"]
from disttutor.checks.claims.ch06 import check_rpc_warnings

print(check_rpc_warnings(sorted({w for res in trained.results for w in res.get("warnings", [])})))

# %% [markdown] id="md-06-30"
# ## Puzzles
#
# One exact answer each: write yours into `mine`, then run the cell.

# %% tags=["puzzle"]
puzzle("6.z1", mine=None)

# %% tags=["puzzle"]
puzzle("6.z2", mine=None)

# %% [markdown] id="md-06-29"
# ## Problems
#
# Work each one on paper, write your number into `mine`, then run the cell. Problem 6.p5 starts from your run
# of section 2.

# %% tags=["problem"]
problem("6.p1", mine=None)

# %% tags=["problem"]
problem("6.p2", mine=None)

# %% tags=["problem"]
problem("6.p3", mine=None)

# %% tags=["problem"]
problem("6.p4", mine=None)

# %% tags=["problem"]
problem("6.p5", mine=None, stages=len(mp_run.results), batch=MP.batch, width=MP.width,
        step_s=max(r["wall_s"] / r["timed_steps"] for r in mp_run.results))

# %% [markdown] id="md-06-22" tags=["takeaways"]
# ## Key takeaways
#
# * Splitting the layers over devices saves memory, not time: without micro-batches one device works at a time.
# * Memory follows the weights, not the layer count: four of eight layers can hold more than half the parameters.
# * In one process `.to(device)` is enough; across processes, send the activation, make the received copy a leaf that requires grad, send its `.grad` back.
# * RPC with distributed autograd and the distributed optimizer records that for you; the article's version passes RRefs where tensors are needed and never trains.
# * Fixed, each version trains the model one process trains, to float32 rounding; today pipelining (chapter 7), FSDP (chapter 11) and TP (chapter 12) replace RPC model parallelism.

# %% [markdown] id="md-06-23" tags=["question"]
# ## Check your understanding
#
# Write your answer before you open the one under it; in the first, the run decides.
#
# **Question 6.1 (predict, then run).** The same 8-layer model (width 256, 4 outputs) is split over **4** ranks, two layers each. What **fraction of the parameters** does the last rank hold? Write a number between 0 and 1 into `my_prediction`, then run the next cell.

# %% tags=["predict"]
my_prediction = None  # a number in [0, 1]: the last rank's share of the parameters, 4 stages

# %%
q1 = disttutor.launch("model_parallel", nproc=4, stream=False, timeout=120,
                      args={"steps": 1, "warmup": 0, "batch": 256, "width": 256, "layers_per_stage": 2})
held = [r["n_params"] for r in q1.results]
measured = held[-1] / sum(held)
reveal("6.q1", my_prediction, measured, rel_tol=0.05,  # 5 %: a count; a quarter (0.25) is a quarter of the layers
       explain=f"parameters per rank: {held}; a 256×256 layer holds 65,792, the 256×4 output layer 1,028")

# %% [markdown] id="md-06-24" tags=["question"]
# **Question 6.2.** In the send/recv version, why must a stage call `requires_grad_(True)` on the activation it receives? What breaks without it?

# %%
answer("6.q2")

# %% [markdown] id="md-06-25" tags=["question"]
# **Question 6.3.** A model cut into 4 equal stages: at best, what fraction of the time is each device busy with plain model parallelism, and with a GPipe pipeline of 12 micro-batches?

# %%
answer("6.q3")

# %%
disttutor.course.chapters.glossary(6)
