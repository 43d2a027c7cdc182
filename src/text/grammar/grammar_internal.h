/* Internals shared by grammar.c (building) and grammar_match.c (stepping, masking). */
#ifndef SG_TEXT_GRAMMAR_INTERNAL_H
#define SG_TEXT_GRAMMAR_INTERNAL_H

#include <stdint.h>

#include "base/arena.h"
#include "text/grammar/grammar.h"

#define G_UNBOUNDED 0xFFFFFFFFu
#define G_ADD 0xFFFFFFFFu /* object frame b: the current property is an additional one */
#define G_END 256         /* pseudo-byte: the end of the output */

enum {
	GN_NEVER,
	GN_UNION,
	GN_REF,
	GN_OBJECT,
	GN_KEY, /* the key of an object with declared properties */
	GN_ARRAY,
	GN_STRING,
	GN_NUMBER,
	GN_LITERALS,
	GN_SEQ,
	GN_REPEAT,
	GN_ROOT,
	GN_RAW, /* raw UTF-8 text up to and including the first occurrence of a terminator */
};

typedef struct glit {
	const uint8_t *s;
	uint32_t len;
} glit;

typedef struct gobj {
	int n;
	glit *names;       /* [n] schema order, JSON-encoded with the quotes */
	int *nodes;        /* [n] value node per property (0: may not appear) */
	int *next_req;     /* [n+1] smallest required index >= i, or n */
	uint8_t *keyable;  /* [n+1] a key may follow when the next declared index is i */
	glit *sorted;      /* [n] names sorted bytewise */
	int *order;        /* [n] property index of sorted[i] */
	int additional;    /* value node of additional properties, -1: none */
	int keynode;       /* GN_KEY node (or a plain string node when n == 0) */
} gobj;

typedef struct gnode {
	uint8_t kind;
	union {
		struct { int *alts; int n; } u;
		struct { int target; } ref;
		gobj obj;
		struct { int obj; } key;
		struct { int items; uint32_t min, max; } arr;
		struct { uint32_t min, max; } str;
		struct { int integer, bounded, decimal, neg; int64_t lo, hi; } num;
		struct { glit *v; int n; } lit;
		struct { int *ch; int n; int ws; } seq;
		struct { int child; uint32_t min, max; int ws; } rep;
		struct { int child; } root;
		struct { glit term; uint8_t *fail; int plain_ok; } raw;
	};
} gnode;

struct sg_grammar {
	gnode *nodes; /* [n] */
	int n, cap;
	sg_arena arena; /* names, literals, child lists */
	int any, any_object;
	int root; /* the GN_ROOT node, after finish */
	int sealed;
	sg_status err; /* sticky build error */
	char errmsg[160];
};

/* One frame of a parse stack: the node it parses and that node's local state. 16 bytes, no
 * padding, so stacks compare with memcmp. */
typedef struct gframe {
	uint32_t node;
	uint8_t st;   /* node-specific state */
	uint8_t u8;   /* UTF-8 validator state (strings, keys); sign (numbers) */
	uint8_t ws;   /* whitespace run (containers); digits in the current part (numbers) */
	uint8_t nest; /* nested objects/arrays at this frame */
	uint32_t a, b; /* node-specific counters */
} gframe;

/* A set of stacks, frames packed one stack after another. Only the used prefix is copied. */
typedef struct gstate {
	uint16_t n;     /* stacks */
	uint16_t total; /* frames in all stacks */
	uint16_t len[SG_GRAMMAR_MAX_STACKS];
	gframe f[SG_GRAMMAR_MAX_TOTAL];
} gstate;

#endif
