/*
 * The flags table. Every environment variable that changes what saragossa does lives here, with
 * its default and a one-line description: kill-switches for optimised paths (so any of them can
 * be turned off to bisect a wrong answer) and tunables. Modules read them through sg_flag_*().
 */
#include "base/flags.h"
#include "base/error.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const sg_flag table[] = {
	{"SARAGOSSA_LOG", SG_FLAG_STR, "info", "log level: debug, info, warn, error or off"},
	{"SARAGOSSA_THREADS", SG_FLAG_INT, "0", "CPU worker threads (0 = one per core)"},
	{"SARAGOSSA_POOL_STEAL", SG_FLAG_BOOL, "1",
	 "CPU threads: in a run that needs no barrier (elementwise ops, attention, float matmuls), the calling thread runs the "
	 "slots no worker has started once its own is done, so a worker the scheduler keeps off a shared core does not hold up "
	 "every op; the same results (0: every thread runs its own slot and the caller waits for all)"},
	{"SARAGOSSA_SIMD", SG_FLAG_STR, "auto",
	 "CPU kernel set: auto (best the CPU has), avx512, avx2, neon or scalar (reference kernels only)"},
	{"SARAGOSSA_CPU_INT8_DOT", SG_FLAG_BOOL, "1",
	 "CPU: quantized weights take 8-bit activations and integer dot products (0: f32 reference kernels)"},
	{"SARAGOSSA_CPU_GEMM", SG_FLAG_BOOL, "1",
	 "CPU: many-token matmuls (prefill) run the blocked GEMM kernels (0: the one-token kernel per token)"},
	{"SARAGOSSA_CPU_GELU_SIMD", SG_FLAG_BOOL, "1",
	 "CPU: GELU with the exact erf (BERT, Whisper) runs the vectorised erf of the x86 kernel sets, within 1e-6 of libm's erff "
	 "(0: the scalar erff loop)"},
	{"SARAGOSSA_CPU_GEMM_PACKED", SG_FLAG_BOOL, "1",
	 "CPU: many-token matmuls of F32/F16/BF16 weights pack their weight rows once per call as floats: AVX-512 runs a 4 row "
	 "pair x 6 token tile of 512-bit FMAs on 8 rows (row pairs interleaved), AVX2 a 4 row x 3 token tile finishing 4 rows' "
	 "sums together; the same sums bit for bit (0: the unpacked 256-bit tile: 4 x 4 on AVX-512, 2 x 4 on AVX2)"},
	{"SARAGOSSA_CPU_TENSOR_CACHE", SG_FLAG_BOOL, "1",
	 "CPU: tensors of 1 MiB and more that the backend allocated are kept when freed (up to 128 MiB) and handed out again, "
	 "zeroed: an encoder's batch of activations then costs no page faults per call (0: malloc and free each time)"},
	{"SARAGOSSA_CPU_NORM_SIMD", SG_FLAG_BOOL, "1",
	 "CPU, x86: layer norm rows (BERT, Whisper) sum their mean and variance in double 4 lanes at a time and scale 8 at a "
	 "time; the scalar loop's bits but where the variance's double sum rounds in another order (0: the scalar loop)"},
	{"SARAGOSSA_CPU_GEMM_PANEL", SG_FLAG_BOOL, "1",
	 "CPU, x86: the encoders' (BERT-family) float matmul weights are packed at load into panels of 16 rows and run as a "
	 "6 token x 16 row outer-product tile (bias first, one FMA per k; not the matvec's bits, the same for a token alone or "
	 "in a batch) (0: the per-call packed GEMM with the matvec's sums)"},
	{"SARAGOSSA_CPU_GEMM_SPLIT_TOKENS", SG_FLAG_BOOL, "1",
	 "CPU: a many-token matmul with fewer than two 64-row chunks a thread (Whisper's attention times V: 64 rows) also "
	 "shares its tokens out in chunks of 96, the same bits (0: rows only, so one thread may do the whole product)"},
	{"SARAGOSSA_CPU_SOFTMAX_SIMD", SG_FLAG_BOOL, "1",
	 "CPU, x86: the softmax op's rows (Whisper's encoder scores) take the max and the scaling 8 lanes at a time, the same bits "
	 "(0: scalar loops around the exponentials)"},
	{"SARAGOSSA_CPU_VERIFY_MT", SG_FLAG_BOOL, "1",
	 "CPU, x86: many-token matmuls that take the one-token kernel (speculative verify steps, SARAGOSSA_CPU_GEMM=0) run up "
	 "to 8 tokens a call on Q4_K and Q6_K weights, each weight block unpacked once for them (the same bits; 0: one "
	 "token a call)"},
	{"SARAGOSSA_CPU_CONV_PACKED", SG_FLAG_BOOL, "1",
	 "CPU: conv1d weights bound for the op alone (Piper voices) are packed at load in panels of 16 output channels and run "
	 "a 6-row x 16-channel tile straight over the input rows, tap by tap (0: im2col rows through the float matmul)"},
	{"SARAGOSSA_CPU_GATE_SIMD", SG_FLAG_BOOL, "1",
	 "CPU: WaveNet's gate tanh(a) * sigmoid(b) (Piper's flow) runs the vectorised tanh and exp of the x86 kernel sets, within "
	 "1e-6 of libm's (0: the tanhf / expf loop)"},
	{"SARAGOSSA_CPU_MLX_REPACK", SG_FLAG_INT, "1",
	 "CPU: MLX 4-bit weights of groups >= 64 are repacked at load into one stream of [scale, bias, codes] groups (0: read the three tensors in place; 2: groups of 32 too)"},
	{"SARAGOSSA_CPU_PREFETCH", SG_FLAG_INT, "4096",
	 "CPU: software prefetch distance of the weight kernels in bytes (0: none, the hardware prefetcher alone)"},
	{"SARAGOSSA_CPU_ATTN_SPLIT_KV", SG_FLAG_BOOL, "1",
	 "CPU: attention with few heads also splits the kv length across threads (0: heads only)"},
	{"SARAGOSSA_CPU_ATTN_TILE", SG_FLAG_BOOL, "1",
	 "CPU: prefill attention runs tiles of tokens x grouped heads that share each K/V block (same bits; 0: one (token, head) at a time)"},
	{"SARAGOSSA_EMBED_BATCH", SG_FLAG_BOOL, "1",
	 "embeddings and reranking: a request's inputs run as packed batches, one GEMM per projection (0: one input per forward)"},
	{"SARAGOSSA_EMBED_PACKED_ATTN", SG_FLAG_BOOL, "1",
	 "embeddings and reranking: a packed batch's attention is one call over every sequence where the backend has it "
	 "(CUDA; 0: one attention call per sequence, as the CPU always does)"},
	{"SARAGOSSA_EMBED_GELU_OP", SG_FLAG_BOOL, "1",
	 "embeddings and reranking: the MLP's exact GELU as the backend's gelu op off the CPU (CUDA; 0: the GLU against a "
	 "row of ones filled and copied per call, as the CPU always does)"},
	{"SARAGOSSA_EMBED_KEEP_ACTS", SG_FLAG_BOOL, "1",
	 "embeddings and reranking: a packed batch's activation buffers are kept with the model between calls, grown when "
	 "a batch needs more (0: allocated and freed on every call)"},
	{"SARAGOSSA_EMBED_POOL_OP", SG_FLAG_BOOL, "1",
	 "embeddings: a packed batch's sentence vectors pooled where the states are (CUDA: one vector a sentence comes back, "
	 "not every token's state; same bits); 0: every state read back and pooled on the host"},
	{"SARAGOSSA_EMBED_BATCH_TOKENS", SG_FLAG_INT, "4096",
	 "embeddings and reranking: tokens per packed batch, the bound on their working memory (at least the model's max tokens)"},
	{"SARAGOSSA_CPU_GDN_CHUNK", SG_FLAG_BOOL, "1",
	 "CPU: prefill runs the gated delta rule in chunks of 64 tokens (0: the token-by-token recurrence)"},
	{"SARAGOSSA_WHISPER_GEMM_ATTN", SG_FLAG_BOOL, "1",
	 "Whisper encoder on host-memory backends: self-attention as per-head matmuls and a row softmax (the GEMM path; 0: the attention op, which device-memory backends always take)"},
	{"SARAGOSSA_CACHE_DIR", SG_FLAG_STR, "",
	 "saragossa's own cache (models, tools); empty = $XDG_CACHE_HOME/saragossa or ~/.cache/saragossa"},
	{"SARAGOSSA_CHUNK", SG_FLAG_INT, "0",
	 "prompt tokens per forward chunk (1 = token by token, the decode path; 0 = by backend: 256 on the CPU, 1024 on CUDA)"},
	{"SARAGOSSA_KV_TYPE", SG_FLAG_STR, "auto", "KV cache element type: auto (f16 on a GPU, f32 on the CPU), f32 or f16"},
	{"SARAGOSSA_QWEN_TTS_FIRST_CHUNK", SG_FLAG_INT, "2",
	 "Qwen3-TTS: frames (1/12 s each) decoded to audio before the first chunk leaves (0: a whole chunk)"},
	{"SARAGOSSA_QWEN_TTS_CODEC_SAME", SG_FLAG_BOOL, "1",
	 "Qwen3-TTS: the codec decoder runs on the talker's backend where it has the conv ops (CUDA); 0: on a CPU "
	 "backend of its own"},
	{"SARAGOSSA_QWEN_TTS_CHUNK", SG_FLAG_INT, "12",
	 "Qwen3-TTS: frames per later audio chunk"},
	{"SARAGOSSA_QWEN_TTS_CONTEXT", SG_FLAG_INT, "25",
	 "Qwen3-TTS: frames of left context each audio chunk is decoded with (25 as the package's chunked decode; more is closer "
	 "to one whole decode, slower)"},
	{"SARAGOSSA_BACKEND", SG_FLAG_STR, "auto",
	 "where models run when no --backend is given: auto (the GPU when this build has CUDA, a GPU is usable and it "
	 "takes the model, else the CPU), cpu or cuda"},
	{"SARAGOSSA_CUDA_GRAPHS", SG_FLAG_BOOL, "1",
	 "CUDA decode: record one graph per token and replay it (0 = issue every op from the host)"},
	{"SARAGOSSA_CUDA_GRAPHS_HYBRID", SG_FLAG_BOOL, "1",
	 "CUDA decode of hybrid layer stacks (Qwen3-Next / Qwen3.5 gated delta net, Gemma 4 without per-layer "
	 "inputs): record and replay their decode step as one graph too, the recurrent state updated in place "
	 "(0 = those models decode op by op)"},
	{"SARAGOSSA_CUDA_GEMM", SG_FLAG_STR, "tf32x3",
	 "CUDA matmul of more than 8 tokens: f32 (cuBLAS FP32 on dequantized tiles), tf32 (TF32 tensor cores on the same tiles, also "
	 "for the prefill attention GEMMs), tf32x3 (three TF32 products on operands split into hi + lo parts: about FP32's "
	 "accuracy), bf16 (tensor cores; logits move ~5e-3) or off (the GEMV kernel)"},
	{"SARAGOSSA_CUDA_ATTN_DECODE", SG_FLAG_INT, "1",
	 "CUDA one-token attention: 1 = the query heads of a KV head share its reads, slices of the live KV length in "
	 "parallel, f16 caches of head dim 64/128/256 on a compile-time-shape kernel; 2 = the same grouping on the "
	 "runtime-shape kernel for every shape; 0 = the general kernel, a block per query head"},
	{"SARAGOSSA_CUDA_ATTN_MERGE", SG_FLAG_BOOL, "1",
	 "CUDA one-token attention: the slices of the KV length merged by a kernel whose loads all go out at once (the "
	 "position read before it waits for the attention kernel; the same bits); 0 = the merge kernel of the many-token "
	 "path"},
	{"SARAGOSSA_CUDA_ATTN_KPRE", SG_FLAG_BOOL, "1",
	 "CUDA one-token attention: each warp's first 32 K rows are copied into shared memory before the kernel waits "
	 "for the one ahead of it (rows of earlier positions; this step's row is read after the wait), where the block's "
	 "shared memory stays within 48 KB (f16 caches, head dim 128 with 4 query heads a block); 0 = off"},
	{"SARAGOSSA_CUDA_ATTN_VFIRST", SG_FLAG_BOOL, "1",
	 "CUDA one-token attention, the tensor-core kernel: the first tiles' V rows are copied into shared memory before "
	 "the kernel waits, as the K rows are (this step's row read after the wait; where two blocks an SM hold the grid, "
	 "more than 48 KB of shared memory a block); 0 = after the scores"},
	{"SARAGOSSA_CUDA_ATTN_PREP", SG_FLAG_BOOL, "1",
	 "CUDA one-token attention over f16 caches of head dim 64/128/256: the attention kernel normalises and rotates "
	 "its own query heads and the step's K row and stores the K and V rows (the same bits; one kernel fewer a "
	 "layer); 0 = the separate prep kernel"},
	{"SARAGOSSA_CUDA_ATTN_MMA", SG_FLAG_BOOL, "1",
	 "CUDA one-token attention over f16 caches of head dim 64 or 128 (no ring, up to 4 query heads a block; with "
	 "SARAGOSSA_CUDA_ATTN_KPRE): scores and values as tensor-core products, queries and probabilities rounded to f16 "
	 "as in prefill (0 = f32 dot products a lane a position)"},
	{"SARAGOSSA_CUDA_ATTN_KPIPE", SG_FLAG_BOOL, "1",
	 "CUDA one-token attention, with SARAGOSSA_CUDA_ATTN_KPRE, for caches where a warp may walk several tiles of 32 "
	 "positions (more than 128 positions a slice: caches of more than 8192 rows): each later tile's K rows are "
	 "copied into shared memory while the tile before reads its V rows (one memory round trip a tile instead of two; "
	 "the same bits); 0 = off"},
	{"SARAGOSSA_CUDA_ATTN_GEMM", SG_FLAG_BOOL, "1",
	 "CUDA attention of more than 8 tokens: scores and values through cuBLAS GEMMs with a masked row softmax between "
	 "(0 = the general kernel)"},
	{"SARAGOSSA_CUDA_ATTN_FLASH", SG_FLAG_BOOL, "1",
	 "CUDA attention of more than 8 tokens over f16 KV caches of head dim 64 or 128 (causal, no ring): one flash-style "
	 "kernel, scores and softmax in registers on f16 tensor cores, no score matrix and no host read of the positions "
	 "(0 = the SARAGOSSA_CUDA_ATTN_GEMM path)"},
	{"SARAGOSSA_CUDA_ATTN_F16", SG_FLAG_BOOL, "1",
	 "CUDA attention of more than 8 tokens over f16 KV caches: the cuBLAS GEMMs take the caches as they are with f16 "
	 "queries and probabilities, one tensor-core product each (0 = the SARAGOSSA_CUDA_GEMM mode on widened caches)"},
	{"SARAGOSSA_CUDA_Q8X", SG_FLAG_BOOL, "1",
	 "CUDA: quantized weights take activations rounded to 8-bit blocks (as the CPU's SIMD kernels): integer dot products "
	 "in the GEMV (1.5-2x the f32 path's bandwidth), and the prefill GEMM sees the same rounded activations; 0 = f32 "
	 "activations everywhere (the exact path)"},
	{"SARAGOSSA_GREEDY_IN_BACKEND", SG_FLAG_BOOL, "1",
	 "generate/serve with plain greedy sampling (temperature 0, no bias, penalty, log-probabilities or constraint): each "
	 "decode step's argmax is found by the backend and only the id comes back (on a GPU: one graph replay and a 4-byte "
	 "read, the logits stay on the device); 0 = the logits come back and the sampler picks"},
	{"SARAGOSSA_SPEC", SG_FLAG_BOOL, "1",
	 "speculative decoding as asked (--spec, --draft-model, the server's per-model and per-request settings); 0 = every "
	 "token decoded on its own (the output is the same either way)"},
	{"SARAGOSSA_SPEC_NGRAM", SG_FLAG_BOOL, "1", "speculative decoding's n-gram (prompt lookup) drafter; 0 = off"},
	{"SARAGOSSA_SPEC_DRAFT_MODEL", SG_FLAG_BOOL, "1", "speculative decoding's draft-model drafter; 0 = off (the draft model is not loaded)"},
	{"SARAGOSSA_SPEC_ADAPTIVE", SG_FLAG_BOOL, "1",
	 "speculative decoding: the draft length follows the measured acceptance (longer while guesses are kept, shorter "
	 "when they are not); 0 = always --draft-max"},
	{"SARAGOSSA_SPEC_COST", SG_FLAG_BOOL, "1",
	 "speculative decoding with SARAGOSSA_SPEC_ADAPTIVE: guessing steps are timed against plain ones, and steps whose kept "
	 "guesses do not pay for their time back off (up to 64 tokens without guesses) as steps that keep none do (not with "
	 "rejection sampling); 0 = only steps that keep no guess back off, up to 8 tokens"},
	{"SARAGOSSA_SPEC_MTP", SG_FLAG_BOOL, "1",
	 "speculative decoding's MTP drafter (Qwen3-Next / Qwen3.5 checkpoints' mtp.* module); 0 = the module is not loaded and "
	 "--spec mtp decodes without guesses"},
	{"SARAGOSSA_SPEC_STEPWISE", SG_FLAG_BOOL, "1",
	 "speculative decoding on a backend without exact verify steps (its match_decode op; the CPU and CUDA have one): "
	 "guesses verified one decode step per token (the answer is exact, the step is not faster than decoding); 0 = such "
	 "backends decode without speculation"},
	{"SARAGOSSA_SPEC_REJECTION", SG_FLAG_BOOL, "1",
	 "sampled speculative decoding with a draft model: guesses drawn from the draft's distribution and kept by rejection "
	 "sampling (min(1, p/q)); 0 = greedy guesses checked against the target's own draw (same tokens as plain sampling "
	 "for a seed, fewer kept)"},
	{"SARAGOSSA_SPEC_P_MIN", SG_FLAG_INT, "50",
	 "draft-model drafter: stop a draft at a token the draft model gives less than this probability among its 10 most "
	 "likely tokens, in percent (0 = never)"},
	{"SARAGOSSA_SAMPLE_IN_BACKEND", SG_FLAG_BOOL, "1",
	 "generate/serve with top-k sampling (and greedy with a bias or penalty) and no log-probabilities or constraint, on a "
	 "backend that keeps the logits (CUDA): each decode step ranks the logits where they are and only the top-k plus the "
	 "biased and penalized tokens' logits come back, the sampler draws from them (the same token as from the full row); "
	 "0 = the logits come back"},
	{"SARAGOSSA_SNAPSHOT_RESIDENT", SG_FLAG_BOOL, "1",
	 "session snapshots and prefix-cache blocks stay in the backend's memory: device-to-device copies on a GPU, no "
	 "round trip through the host (0 = copies in host memory)"},
	{"SARAGOSSA_CUDA_PDL", SG_FLAG_BOOL, "1",
	 "CUDA decode chain (norms, GEMVs, attention, argmax) with programmatic dependent launch: a kernel's blocks start "
	 "while the previous kernel drains and wait for its results on the GPU; 0 = plain launches"},
	{"SARAGOSSA_CUDA_TRACE", SG_FLAG_STR, "",
	 "a CUDA build made with CUDA_TRACE=1: the file the decode chain's timeline (when each traced kernel's wait "
	 "returned) is written to when the backend closes, for tools/cuda_trace.py; other builds ignore it"},
	{"SARAGOSSA_CUDA_X3_CACHE", SG_FLAG_INT, "4096",
	 "CUDA GEMM in one-GEMM tf32x3 mode: f32 weights bound for matmul alone (an encoder's) are split into the "
	 "(hi, hi, lo) layout once and kept, up to this many MiB in all, instead of split again every call (0 = never kept)"},
	{"SARAGOSSA_CUDA_PACKED_TILES", SG_FLAG_BOOL, "1",
	 "CUDA attention of an encoder's packed batch: for heads of at most 128 dims, a block per 16 tokens and head that "
	 "stages each tile of its sequences' K and V rows once for its tokens; 0 = a warp per token and head reading them "
	 "itself"},
	{"SARAGOSSA_CUDA_SHARED_X", SG_FLAG_BOOL, "1",
	 "CUDA GEMM in one-GEMM tf32x3 mode: weights over one input (an encoder's q, k and v projections) whose splits are "
	 "kept (SARAGOSSA_CUDA_X3_CACHE) share one split of the input instead of one each; 0 = one each"},
	{"SARAGOSSA_CUDA_GEMM_X3_ONE", SG_FLAG_INT, "1536",
	 "CUDA GEMM in tf32x3 mode: for weights of at most this many columns (K), the three TF32 products and the bias as "
	 "one cuBLAS GEMM of depth 3K over operands laid out for it; wider ones (and 0: all) as three GEMMs on the hi and lo "
	 "parts, then a bias kernel"},
	{"SARAGOSSA_CUDA_GEMM_F16", SG_FLAG_BOOL, "1",
	 "CUDA prefill of quantized weights on 8-bit activations (SARAGOSSA_CUDA_Q8X): f16 tensor-core GEMMs on the rounded "
	 "activations (a power-of-two scale per token keeps them in range; 0 = the SARAGOSSA_CUDA_GEMM mode)"},
	{"SARAGOSSA_VERIFY_GRAPHS", SG_FLAG_INT, "16",
	 "exact verify steps of speculative decoding (2 to 32 tokens) recorded as a graph per token count and replayed "
	 "after, where decode steps are (CUDA; not hybrid or MTP stacks), once a count has run this many times op by op "
	 "(a recording costs several steps' time); 1 = at its first step, 0 = never"},
	{"SARAGOSSA_CUDA_VERIFY_ATTN", SG_FLAG_INT, "8",
	 "CUDA verify steps (exact): the one-token attention of every token of the step in one launch (the token in the "
	 "grid; each token the bits of its own launch) while the one-token kernel's slices of the KV cache (64 rows each, "
	 "up to 64) are at most this many (8: caches of at most 512 rows; longer ones a launch per token, faster there); "
	 "0 = always a launch per token"},
	{"SARAGOSSA_CUDA_VERIFY_BATCH", SG_FLAG_BOOL, "1",
	 "CUDA verify steps of speculative decoding (exact: each token gets a decode step's bits): the one-token GEMV kernels "
	 "over all the step's tokens in one launch, a row block's tokens side by side so the weights are read once; 0 = each "
	 "token through the one-token ops in turn"},
	{"SARAGOSSA_CUDA_VERIFY_MT", SG_FLAG_BOOL, "1",
	 "CUDA verify steps (exact) on Q4_K, Q6_K and MLX 4-bit weights: a block takes a group of up to 8 of the step's "
	 "tokens, its weights read once for all of them (each token the bits of its one-token GEMV); 0 = a block a token"},
	{"SARAGOSSA_CUDA_FUSED", SG_FLAG_BOOL, "1",
	 "CUDA decode (one token): the norm and the projections of a stage (q/k/v; gate/up with the GLU; o or down with the "
	 "residual add) as one fused GEMV launch (0 = one op each)"},
	{"SARAGOSSA_CUDA_GEMV_SB", SG_FLAG_BOOL, "1",
	 "CUDA one-token GEMV (dense and MoE) of Q4_K, Q6_K and MLX 4-bit weights, a whole 256-element block of the planar "
	 "rows per lane (the scales decoded once); 0 = the 32-element unit kernels the other formats use"},
	{"SARAGOSSA_CUDA_GEMV_XSTAGE", SG_FLAG_BOOL, "1",
	 "CUDA block-per-lane GEMVs (SARAGOSSA_CUDA_GEMV_SB): the 8-bit activations, their half sums and scales staged in "
	 "shared memory by cp.async, every copy in flight at once (0 = a loop of loads, the scales read from global memory "
	 "after the barrier; the same bits)"},
	{"SARAGOSSA_CUDA_GEMV_MIXED", SG_FLAG_BOOL, "1",
	 "CUDA one-token fused store stage whose matrices are Q4_K and Q6_K (q, k, v of a Q4_K_M file): one "
	 "block-per-lane launch for both kinds (0 = one launch per run of one format; the same bits)"},
	{"SARAGOSSA_CUDA_GEMV_PRE", SG_FLAG_BOOL, "1",
	 "CUDA one-token GEMV launches of F32, F16 or BF16 weights of at most 4 MB (a MoE router): a thread's first "
	 "units loaded before the wait for the kernel ahead (weights are never written; 0 = after it; the same bits)"},
	{"SARAGOSSA_CUDA_GEMV_PERSIST", SG_FLAG_BOOL, "1",
	 "CUDA one-token block-per-lane GEMVs (Q4_K, Q6_K, MLX 4-bit) of more tasks than SMs and at most 3 an SM in a "
	 "persistent grid whose lanes walk the blocks of several rows with the next one's loads in flight, the activations "
	 "staged once per block (0 = a block per task everywhere; the same bits)"},
	{"SARAGOSSA_CUDA_MOE_DECODE", SG_FLAG_BOOL, "1",
	 "CUDA one-token MoE matmuls: each slot's expert straight from the routing ids, two rows a warp (0 = the sorting "
	 "kernel every token count takes)"},
	{"SARAGOSSA_CUDA_ROUTE_WARP", SG_FLAG_BOOL, "1",
	 "CUDA MoE routing of up to 256 experts by one warp holding the probabilities in registers (the same picks and "
	 "weights; 0 = the shared-memory routing kernel)"},
	{"SARAGOSSA_CUDA_MOE_IDS_EARLY", SG_FLAG_BOOL, "1",
	 "CUDA one-token MoE: the gate/up expert kernel lets its successor start only after its wait, so that the down "
	 "experts read their ids and send their weights' loads before they wait (the same bits; 0 = after)"},
	{"SARAGOSSA_CUDA_MOE_GEMM", SG_FLAG_INT, "64",
	 "CUDA MoE matmuls of at least this many tokens, quantized experts on 8-bit activations (SARAGOSSA_CUDA_Q8X, "
	 "SARAGOSSA_CUDA_GEMM_F16): slots sorted by expert, the used experts dequantized to f16 and one grouped cuBLAS "
	 "tensor-core GEMM per weight tile; 0 = the grouped GEMV at every token count"},
	{"SARAGOSSA_HUB_RETRIES", SG_FLAG_INT, "3",
	 "times a cut Hugging Face download is resumed (with Range) before pull gives up"},
	{"SARAGOSSA_API_KEY", SG_FLAG_STR, "", "bearer token `serve` requires on TCP (same as --api-key)"},
	{"SARAGOSSA_TOKENIZER_CACHE", SG_FLAG_BOOL, "on", "per-thread cache of recently tokenized BPE words"},
	{"SARAGOSSA_MEM_LIMIT", SG_FLAG_INT, "0",
	 "memory a model's weights may take at load (bytes, k/m/g suffix); 0 = what is available now, -1 = no check"},
	{"SARAGOSSA_DEFAULT_MODEL", SG_FLAG_STR, "",
	 "model `run` and `generate` use when none is given; empty = Gemma 3 270M in saragossa's models folder"},
	{"SARAGOSSA_DEFAULT_STT_MODEL", SG_FLAG_STR, "",
	 "Whisper model `transcribe` uses when none is given; empty = whisper-tiny.en in saragossa's models folder"},
	{"SARAGOSSA_SERVE_EMBED_MAX_INPUTS", SG_FLAG_INT, "8192",
	 "serve: the most inputs one embedding request (or documents one rerank request) may hold; more is a 400"},
	{"SARAGOSSA_SERVE_RESPONSES_MAX", SG_FLAG_INT, "256",
	 "serve: stored /v1/responses kept for previous_response_id and GET (least recently used go first)"},
	{"SARAGOSSA_DEFAULT_EMBED_MODEL", SG_FLAG_STR, "",
	 "model `embed` uses when none is given; empty = all-MiniLM-L6-v2 in saragossa's models folder"},
	{"SARAGOSSA_GRAMMAR_FAST_MASK", SG_FLAG_BOOL, "1",
	 "constrained decoding: accept plain tokens inside strings by bitmap and whole trie subtrees (0: walk every token)"},
	{"RETI_SERVE_PREFIX_CACHE", SG_FLAG_BOOL, "1",
	 "serve, run's chat: block prefix cache (a prompt restores the state of its longest cached prefix; 0 = off, like --no-prefix-cache)"},
	{"RETI_SERVE_PREFIX_BLOCK_TOKENS", SG_FLAG_INT, "256",
	 "tokens per prefix-cache block; every prefill (serve, run, generate) is cut at its multiples, cache on or off"},
	{"RETI_SERVE_PREFIX_CACHE_BLOCKS", SG_FLAG_INT, "128", "serve, run's chat: prefix-cache blocks kept in all (least recently used go first)"},
	{"RETI_SERVE_PREFIX_BLOCKS_PER_SESSION", SG_FLAG_INT, "128", "serve, run's chat: prefix-cache blocks one session key may hold"},
	{"RETI_SERVE_MODEL_POOL", SG_FLAG_INT, "2", "serve: models resident at once (a request for another loads it)"},
	{"RETI_SERVE_LRU", SG_FLAG_BOOL, "1",
	 "serve: a full model pool evicts its least recently used model (0: keep models until restart, refuse the load with 503)"},
	{"RETI_SERVE_OOM_GUARD", SG_FLAG_BOOL, "1",
	 "serve: project memory before a model load, cache block or long prompt; evict blocks, then idle models, else 503"},
	{"RETI_SERVE_MEMORY_HEADROOM_BYTES", SG_FLAG_INT, "2g", "serve: memory the guard leaves free on the host (and accelerator)"},
	{"RETI_SERVE_MEMORY_CAP_BYTES", SG_FLAG_STR, "auto",
	 "serve: a static ceiling on the process footprint in bytes (k/m/g suffix); auto or 0 = none"},
	{"RETI_SERVE_BACKEND", SG_FLAG_STR, "auto",
	 "serve: backend the models run on: auto (the GPU when this build has CUDA and one is usable, else the CPU), cpu or "
	 "cuda (on a GPU, device memory is projected against its free bytes); --backend sets it"},
	{"SARAGOSSA_EXPERT_CACHE", SG_FLAG_STR, "off",
	 "MoE models: routed experts read from disk into a slot cache of this size (off, auto = the planner's choice when the "
	 "model does not fit, a size like 6g, or a share of the experts like 25%); --expert-cache sets it"},
	{"SARAGOSSA_EXPERT_POLICY", SG_FLAG_STR, "freq",
	 "expert cache eviction: freq (a use count that halves every pool-size lookups) or lru (least recently used)"},
	{"SARAGOSSA_EXPERT_PREFETCH", SG_FLAG_STR, "off",
	 "expert cache: read the next layer's likely experts ahead: router (its router applied to this layer's input), last "
	 "(the experts it took last token) or off (measured faster on a loaded 2-core machine: bench/RESULTS.md)"},
	{"SARAGOSSA_EXPERT_DIRECT", SG_FLAG_STR, "auto",
	 "expert cache: 1 reads experts with O_DIRECT where the file system takes it, bypassing the page cache; 0 buffered reads "
	 "(the page cache then holds experts between disk and the pool); auto: O_DIRECT for a pool in host memory, buffered "
	 "for a GPU's (the page cache is its host-memory tier)"},
	{"SARAGOSSA_CUDA_EXPERT_REPACK", SG_FLAG_BOOL, "1",
	 "CUDA expert slot cache: an expert's file bytes go to the GPU in one copy and are repacked into the slot's row layout "
	 "there (0: repacked on the host, then copied)"},
	{"SARAGOSSA_EXPERT_PIN", SG_FLAG_BOOL, "1",
	 "expert cache on a GPU: the host staging slots are page-locked, so their uploads are DMA transfers (0: pageable memory)"},
	{"SARAGOSSA_EXPERT_URING", SG_FLAG_BOOL, "1",
	 "expert cache: reads go through io_uring, many in flight (0: one synchronous pread at a time, no prefetch)"},
	{"SARAGOSSA_PLAN_TARGET", SG_FLAG_STR, "auto",
	 "memory planner (doctor --sim-ram, --expert-cache auto): a target cap on the model's memory in bytes (k/m/g); auto = none"},
	{"SARAGOSSA_DEFAULT_TTS_MODEL", SG_FLAG_STR, "",
	 "speak: the voice model used without -m (empty: piper-joe in saragossa's models folder)"},
	{"SARAGOSSA_PIPER_CHUNK", SG_FLAG_INT, "32",
	 "Piper voices: decoder frames in a sentence's first audio chunk (later chunks double up to 256), decoded with "
	 "overlap so chunks equal the one-shot waveform; 0 = each sentence in one piece"},
	{"SARAGOSSA_PIPER_FLOW_SPLIT", SG_FLAG_BOOL, "1",
	 "Piper voices: the flow runs first over the frames of a sentence's first audio chunk (and its reach), the rest "
	 "after that chunk is out, so the first audio waits for less (the same samples; 0: the whole flow first)"},
	{"SARAGOSSA_PIPER_CROP", SG_FLAG_BOOL, "1",
	 "Piper voices: each decoder stage runs only on the rows that reach the chunk's own samples (the chunk's context is "
	 "dropped before the costly late stages, the same samples; 0: every stage over the whole chunk and its context)"},
};

/* Credentials among the flags: never printed. */
static const char *const secrets[] = {"SARAGOSSA_API_KEY"};

#define N_FLAGS ((int)(sizeof(table) / sizeof(table[0])))

typedef struct {
	const char *text; /* effective value as text (env or default) */
	int from_env;
	int invalid;
	int64_t ival; /* parsed bool/int */
} flag_value;

static flag_value values[N_FLAGS];
static pthread_once_t once = PTHREAD_ONCE_INIT;

int sg_parse_bool(const char *s, int *out)
{
	static const char *yes[] = {"1", "on", "true", "yes"}, *no[] = {"0", "off", "false", "no"};
	for (int i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0) return *out = 1, 0;
		if (strcasecmp(s, no[i]) == 0) return *out = 0, 0;
	}
	return -1;
}

int sg_parse_int(const char *s, int64_t *out)
{
	if (!s || !*s) return -1;
	errno = 0;
	char *end;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s) return -1;
	int64_t mul = 1;
	if (*end) {
		switch (*end) {
		case 'k': case 'K': mul = 1024; break;
		case 'm': case 'M': mul = 1024 * 1024; break;
		case 'g': case 'G': mul = 1024LL * 1024 * 1024; break;
		default: return -1;
		}
		if (end[1]) return -1;
	}
	if (v > INT64_MAX / mul || v < INT64_MIN / mul) return -1;
	*out = (int64_t)v * mul;
	return 0;
}

static int parse_value(const sg_flag *f, const char *text, int64_t *iv)
{
	int b;
	switch (f->kind) {
	case SG_FLAG_BOOL:
		if (sg_parse_bool(text, &b)) return -1;
		*iv = b;
		return 0;
	case SG_FLAG_INT: return sg_parse_int(text, iv);
	case SG_FLAG_STR: *iv = 0; return 0;
	}
	return -1;
}

static void load(void)
{
	for (int i = 0; i < N_FLAGS; i++) {
		const sg_flag *f = &table[i];
		flag_value *v = &values[i];
		const char *env = getenv(f->name);
		v->from_env = env != NULL;
		v->invalid = 0;
		v->text = env ? env : f->def;
		if (parse_value(f, v->text, &v->ival)) {
			fprintf(stderr, "saragossa warn: %s='%s' is not a valid %s; using the default '%s'\n",
				f->name, env, f->kind == SG_FLAG_BOOL ? "boolean" : "integer", f->def);
			v->invalid = 1;
			v->text = f->def;
			SG_ASSERT(parse_value(f, f->def, &v->ival) == 0);
		}
	}
}

static int find(const char *name)
{
	pthread_once(&once, load);
	for (int i = 0; i < N_FLAGS; i++)
		if (strcmp(table[i].name, name) == 0) return i;
	fprintf(stderr, "saragossa: flag %s is not in the registry (src/base/flags.c)\n", name);
	SG_ASSERT(!"flag registered");
}

int sg_flag_bool(const char *name)
{
	int i = find(name);
	SG_ASSERT(table[i].kind == SG_FLAG_BOOL);
	return (int)values[i].ival;
}

int64_t sg_flag_int(const char *name)
{
	int i = find(name);
	SG_ASSERT(table[i].kind == SG_FLAG_INT);
	return values[i].ival;
}

const char *sg_flag_str(const char *name) { return values[find(name)].text; }

int sg_flag_is_invalid(const char *name) { return values[find(name)].invalid; }

int sg_flag_is_secret(const char *name)
{
	for (size_t i = 0; i < sizeof(secrets) / sizeof(secrets[0]); i++)
		if (!strcmp(secrets[i], name)) return 1;
	return 0;
}

int sg_flags_count(void) { return N_FLAGS; }

const sg_flag *sg_flag_at(int i, const char **value, int *from_env)
{
	pthread_once(&once, load);
	if (i < 0 || i >= N_FLAGS) return NULL;
	if (value) *value = values[i].text;
	if (from_env) *from_env = values[i].from_env;
	return &table[i];
}

void sg_flags_reload(void)
{
	pthread_once(&once, load);
	load();
}
