"""Chapter 10: each bug of the article's §10 model has a test that catches it, and the
corrected model (disttutor.lm.model) passes the same test. Single process, small, fast."""
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from disttutor.lm import corpus
from disttutor.lm import model as lm
from disttutor.lm import article as lm_article

V, D, H, L, B, T = 60, 32, 4, 2, 3, 10


@pytest.fixture(scope="module")
def article_model():
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # batch_first=False nested-tensor notice: the point of a test below
        return lm_article.load(runnable=True)["TransformerModel"](V, D, H, L).eval()


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return lm.TinyLM(V, D, H, L, max_len=64, dropout=0.0).eval()


def tokens(seed=0):
    return torch.randint(1, V, (B, T), generator=torch.Generator().manual_seed(seed))


# --- the article's code does not run as written --------------------------------------

def test_bug_math_never_imported():
    ns = lm_article.load()
    with pytest.raises(NameError, match="math"):
        ns["TransformerModel"](V, D, H, L)  # PositionalEncoding.__init__ calls math.log


def test_bug_d_model_never_stored():
    ns = lm_article.load()
    ns["math"] = __import__("math")  # fix only the first bug
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # batch_first=False nested-tensor notice
        model = ns["TransformerModel"](V, D, H, L)
    with pytest.raises(AttributeError, match="d_model"):
        model(tokens())


# --- once it runs, it is silently wrong ------------------------------------------------

@torch.no_grad()
def test_bug_layout_mixes_the_batch(article_model, tiny):
    """batch_first=False: a (batch, time) input is read as (time, batch): sequences attend to each other."""
    x = tokens()
    y = x.clone()
    y[1] = tokens(1)[1]  # change only sequence 1
    assert not torch.allclose(article_model(x)[0], article_model(y)[0])  # ... and sequence 0's output moves
    torch.testing.assert_close(tiny(x)[0], tiny(y)[0])  # corrected: sequences are independent


@torch.no_grad()
def test_bug_positional_encoding_indexes_the_batch(article_model, tiny):
    """pe[:x.size(0)] on (batch, time, d): every position of sample b gets the same vector pe[b]."""
    h = torch.zeros(B, T, D)
    out = article_model.pos_encoder(h)
    assert torch.equal(out[:, 0], out[:, 5])              # position 0 and 5 look the same ...
    assert not torch.equal(out[0], out[1])                # ... but sample 0 and 1 differ
    fixed = h + tiny.pe[:, :T]
    assert not torch.equal(fixed[:, 0], fixed[:, 5]) and torch.equal(fixed[0], fixed[1])


@torch.no_grad()
def test_bug_no_causal_mask_reads_the_future():
    """Without a mask, the output at t depends on token t+1: the model can read its own answer."""
    torch.manual_seed(0)
    ns = lm_article.load(runnable=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = ns["TransformerModel"](V, D, H, L).eval()
    # give it the right layout so only the missing mask is tested: (time, batch)
    x = tokens().t()
    y = x.clone()
    y[5] = (y[5] % (V - 1)) + 1  # change token 5 of every sequence
    assert not torch.allclose(m(x)[:5], m(y)[:5])  # positions 0..4 changed: they saw token 5


@torch.no_grad()
def test_corrected_model_is_causal(tiny):
    x = tokens()
    y = x.clone()
    y[:, 5] = (y[:, 5] % (V - 1)) + 1
    torch.testing.assert_close(tiny(x)[:, :5], tiny(y)[:, :5])  # the past does not see the future
    assert not torch.allclose(tiny(x)[:, 5], tiny(y)[:, 5])


def test_bug_loss_without_shift_rewards_copying():
    """Scoring logits at t against token t (no shift) gives a copying model zero loss."""
    x = tokens()
    copy_logits = 50.0 * F.one_hot(x, V).float()  # "predict the token you are given"
    article_loss = F.cross_entropy(copy_logits.view(-1, V), x.view(-1))
    assert article_loss < 1e-6
    shifted = lm.lm_loss(copy_logits[:, :-1], x)
    assert shifted > 1.0  # with the shift, copying is (rightly) useless


def test_bug_ignore_index_zero_drops_a_real_character():
    tok = corpus.tokenizer()
    assert tok.chars[0] == "\n"  # id 0 is the newline: a real token of the text
    x = tok.encode("In the beginning\nGod created\n").unsqueeze(0)
    logits = torch.randn(1, x.size(1) - 1, tok.vocab_size, generator=torch.Generator().manual_seed(0))
    article = F.cross_entropy(logits.reshape(-1, tok.vocab_size), x[:, 1:].reshape(-1), ignore_index=0)
    assert not torch.isclose(article, lm.lm_loss(logits, x))  # the newlines were silently not trained


def test_bug_accumulation_loss_on_3d_output_raises():
    """§10.3: criterion(output, target) with output (B, T, V): cross-entropy reads T as the classes."""
    with pytest.raises((RuntimeError, ValueError)):
        nn.CrossEntropyLoss()(torch.randn(B, T, V), tokens())


def test_bug_checkpoint_wrapper():
    """§10.3: no use_reentrant (a warning today, an error announced), and the wrapper cannot take the mask."""
    ns = lm_article.load_checkpointing()
    layer = nn.TransformerEncoderLayer(D, H, batch_first=True)
    wrapped = ns["CheckpointedTransformer"](layer)
    with pytest.warns(UserWarning, match="use_reentrant"):
        wrapped(torch.randn(B, T, D, requires_grad=True))
    mask = nn.Transformer.generate_square_subsequent_mask(T)
    with pytest.raises(TypeError):
        wrapped(torch.randn(B, T, D), src_mask=mask)  # what nn.TransformerEncoder passes to its layers


def test_activation_checkpointing_same_gradients():
    """Non-reentrant checkpointing recomputes activations: same loss and gradients, no warning."""
    x = tokens()
    grads = []
    for ckpt in (False, True):
        torch.manual_seed(0)
        m = lm.TinyLM(V, D, H, L, max_len=64, dropout=0.0, activation_checkpointing=ckpt)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            lm.window_loss(m, x).backward()
        grads.append(torch.cat([p.grad.flatten() for p in m.parameters()]))
    # the same fp32 ops run again in backward: bitwise equal in practice; 1e-6 allows kernel reordering
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-6, atol=1e-6)


def test_bad_input_is_a_clear_error(tiny):
    with pytest.raises(ValueError, match="batch, time"):
        tiny(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len"):
        tiny(torch.zeros(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="multiple of nhead"):
        lm.TinyLM(V, 30, 4)
    with pytest.raises(ValueError, match="not in the vocabulary"):
        corpus.tokenizer().encode("héllo")


def test_corpus_windows_and_sharding():
    tr, va = corpus.splits()
    assert len(tr) > 150_000 and len(va) > 15_000
    w = corpus.windows(tr, 16)
    torch.testing.assert_close(w[0, 1:], tr[1:17])  # each window holds its own shifted target
    # one epoch: every window used once across ranks and micro-batches (drop_last trims the rest)
    per_rank, world = 4, 2
    per_epoch = (len(w) // world) // per_rank
    seen = [i for m in range(per_epoch) for r in range(world)
            for i in corpus.micro_batch_indices(len(w), m, per_rank, r, world, 0)]
    assert len(set(seen)) == len(seen) == per_epoch * per_rank * world
    assert per_epoch * per_rank * world > len(w) - world * per_rank  # at most one micro-batch's worth dropped
    assert not torch.equal(corpus.micro_batch(w, 0, 4, 0, 2, 0), corpus.micro_batch(w, per_epoch, 4, 0, 2, 0))


def test_generate_is_reproducible(tiny):
    p = torch.tensor([1, 2, 3])
    assert torch.equal(lm.generate(tiny, p, 8, seed=3), lm.generate(tiny, p, 8, seed=3))


def test_article_train_ladder_applies_every_fix_and_compiles():
    """§10.2's text takes every size edit and every fix exactly where the ladder says (chapter 10 runs it)."""
    from disttutor.lm import article_ddp

    for k in range(len(article_ddp.FIXES) + 1):
        src = article_ddp.train_source(k)
        compile(src, "<article §10.2>", "exec")
        compile(article_ddp.prelude(k) + article_ddp.model_source(k), "<article §10.1>", "exec")
        assert ("backend='nccl' if torch.cuda.is_available() else 'gloo'" in src) == (k >= 1)
    verbatim = article_ddp.ARTICLE_TRAIN
    assert "backend='nccl'," in verbatim and ".to(rank)" in verbatim and "GradScaler()" in verbatim
    assert "import math" not in article_ddp.prelude(0) and "import math" in article_ddp.prelude(2)
    assert "self.d_model = d_model" in article_ddp.model_source(len(article_ddp.FIXES))
    assert len({f.expect for f in article_ddp.FIXES}) == len(article_ddp.FIXES)  # each fix answers its own failure
