/*
 * npz reader (see npz.h). The file is untrusted: every offset and size is checked against the
 * file before anything points into it, and the error names the entry and the numbers.
 */
#include "formats/npz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"

#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOC64 0x07064b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_LOCAL 0x04034b50u
#define NPY_MAX_HEADER 65536 /* numpy's own limit on a header it reads without allow_pickle */

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

void sg_npz_free(sg_npz *z)
{
	if (!z) return;
	for (int i = 0; i < z->n_tensors; i++) sg_free(z->tensors[i].name);
	sg_free(z->tensors);
	memset(z, 0, sizeof(*z));
}

/* The central directory's entry count, size and offset, from the end record (zip64 or not). */
static sg_status find_central(const uint8_t *d, size_t size, const char *what, uint64_t *n, uint64_t *cd_off)
{
	if (size < 22) return sg_error(SG_ERR_FORMAT, "npz: %s: %zu bytes is too short for a zip file", what, size);
	size_t lo = size - 22 > 65535 ? size - 22 - 65535 : 0, e = size - 22 + 1;
	int found = 0;
	while (e-- > lo) {
		if (rd32(d + e) == SIG_EOCD && e + 22 + rd16(d + e + 20) == size) {
			found = 1;
			break;
		}
	}
	if (!found) return sg_error(SG_ERR_FORMAT, "npz: %s: no zip end-of-directory record (not a zip file, or truncated)", what);
	uint64_t count = rd16(d + e + 10), cd_size = rd32(d + e + 12), off = rd32(d + e + 16);
	if (count == 0xffff || cd_size == 0xffffffffu || off == 0xffffffffu) {
		if (e < 20 || rd32(d + e - 20) != SIG_LOC64)
			return sg_error(SG_ERR_FORMAT, "npz: %s: zip64 sizes without a zip64 locator", what);
		uint64_t z = rd64(d + e - 20 + 8);
		if (z > size || size - z < 56 || rd32(d + z) != SIG_EOCD64)
			return sg_error(SG_ERR_FORMAT, "npz: %s: the zip64 end record at %llu is outside the file", what,
					(unsigned long long)z);
		count = rd64(d + z + 32);
		cd_size = rd64(d + z + 40);
		off = rd64(d + z + 48);
	}
	if (off > size || cd_size > size - off)
		return sg_error(SG_ERR_FORMAT, "npz: %s: the central directory (%llu bytes at %llu) runs past the file size %zu",
				what, (unsigned long long)cd_size, (unsigned long long)off, size);
	if (count > cd_size / 46)
		return sg_error(SG_ERR_FORMAT, "npz: %s: %llu entries do not fit a %llu-byte central directory", what,
				(unsigned long long)count, (unsigned long long)cd_size);
	*n = count;
	*cd_off = off;
	return SG_OK;
}

/* The value of `key` in a .npy header dict: the text after "'key':" with spaces skipped. */
static const char *npy_field(const char *h, const char *key)
{
	char pat[32];
	snprintf(pat, sizeof(pat), "'%s':", key);
	const char *p = strstr(h, pat);
	if (!p) return NULL;
	for (p += strlen(pat); *p == ' '; p++) {}
	return p;
}

static const struct {
	const char *descr;
	sg_type type;
	int size;
} npy_types[] = {
	{"f4", SG_TYPE_F32, 4}, {"f2", SG_TYPE_F16, 2}, {"f8", SG_TYPE_F64, 8}, {"u4", SG_TYPE_U32, 4},
	{"i8", SG_TYPE_I64, 8}, {"i4", SG_TYPE_I32, 4}, {"i2", SG_TYPE_I16, 2}, {"i1", SG_TYPE_I8, 1},
	{"u1", SG_TYPE_U8, 1},  {"b1", SG_TYPE_BOOL, 1},
};

/* One .npy payload of n bytes at p into t (type, shape, data, nbytes). */
static sg_status parse_npy(const uint8_t *p, uint64_t n, const char *what, sg_tensor *t)
{
	const char *name = t->name;
	if (n < 10 || memcmp(p, "\x93NUMPY", 6))
		return sg_error(SG_ERR_FORMAT, "npz: %s: entry '%s' is not a .npy array (no \\x93NUMPY magic)", what, name);
	int major = p[6];
	uint64_t hl = major == 1 ? rd16(p + 8) : rd32(p + 8), pre = major == 1 ? 10 : 12;
	if (major < 1 || major > 3)
		return sg_error(SG_ERR_UNSUPPORTED, "npz: %s: entry '%s' is .npy version %d (supported: 1, 2, 3)", what, name, major);
	if (hl > NPY_MAX_HEADER || pre + hl > n)
		return sg_error(SG_ERR_FORMAT, "npz: %s: entry '%s': a %llu-byte .npy header in a %llu-byte entry", what, name,
				(unsigned long long)hl, (unsigned long long)n);
	char h[NPY_MAX_HEADER + 1];
	memcpy(h, p + pre, hl);
	h[hl] = 0;
	const char *descr = npy_field(h, "descr"), *fo = npy_field(h, "fortran_order"), *sh = npy_field(h, "shape");
	if (!descr || !fo || !sh || *descr != '\'' || *sh != '(')
		return sg_error(SG_ERR_FORMAT, "npz: %s: entry '%s': the .npy header lacks descr, fortran_order or shape", what, name);
	if (strncmp(fo, "False", 5))
		return sg_error(SG_ERR_UNSUPPORTED, "npz: %s: entry '%s' is stored in Fortran order (C order only)", what, name);
	char d[16] = "";
	const char *q = strchr(descr + 1, '\'');
	if (q && q - descr - 1 < (long)sizeof(d)) memcpy(d, descr + 1, (size_t)(q - descr - 1));
	int esize = 0;
	t->type = SG_TYPE_COUNT;
	/* '<' little-endian, '|' no byte order (one byte), '=' native (numpy writes '<' on x86 and arm) */
	if (d[0] == '<' || d[0] == '|' || d[0] == '=')
		for (size_t i = 0; i < sizeof(npy_types) / sizeof(npy_types[0]); i++)
			if (!strcmp(d + 1, npy_types[i].descr)) t->type = npy_types[i].type, esize = npy_types[i].size;
	if (t->type == SG_TYPE_COUNT || (d[0] == '|' && esize != 1))
		return sg_error(SG_ERR_UNSUPPORTED, "npz: %s: entry '%s' has dtype '%s' (supported: little-endian f2 f4 f8 u4 i8 i4 i2 i1 u1 b1)",
				what, name, d);
	int64_t dims[SG_MAX_DIMS];
	int nd = 0;
	const char *c = sh + 1;
	for (;;) {
		while (*c == ' ' || *c == ',') c++;
		if (*c == ')') break;
		char *end;
		long long v = strtoll(c, &end, 10);
		if (end == c || v < 0 || nd == SG_MAX_DIMS)
			return sg_error(SG_ERR_FORMAT, "npz: %s: entry '%s': a bad shape %.40s", what, name, sh);
		dims[nd++] = v;
		c = end;
	}
	t->n_dims = nd;
	for (int i = 0; i < nd; i++) t->ne[i] = dims[nd - 1 - i]; /* innermost first */
	int64_t count = 0;
	if (sg_shape_product(t->ne, nd, &count) || (uint64_t)count > (n - pre - hl) / (uint64_t)esize ||
	    (uint64_t)count * (uint64_t)esize != n - pre - hl)
		return sg_error(SG_ERR_FORMAT, "npz: %s: entry '%s': shape %.40s of %s needs %lld bytes, the entry holds %llu", what, name,
				sh, d, (long long)count * esize, (unsigned long long)(n - pre - hl));
	t->data = p + pre + hl;
	t->nbytes = n - pre - hl;
	return SG_OK;
}

/* The zip64 extra field's values of an entry whose 32-bit fields are 0xffffffff. */
static void zip64_extra(const uint8_t *x, uint32_t xl, uint64_t *usize, uint64_t *csize, uint64_t *off)
{
	for (uint32_t k = 0; k + 4 <= xl;) {
		uint32_t id = rd16(x + k), len = rd16(x + k + 2);
		if (k + 4 + len > xl) return;
		if (id == 1) {
			const uint8_t *v = x + k + 4;
			uint32_t used = 0;
			uint64_t *f[3] = {usize, csize, off};
			for (int i = 0; i < 3; i++)
				if (*f[i] == 0xffffffffu && used + 8 <= len) *f[i] = rd64(v + used), used += 8;
			return;
		}
		k += 4 + len;
	}
}

sg_status sg_npz_parse(const uint8_t *data, size_t size, const char *what, int file, sg_npz *out)
{
	memset(out, 0, sizeof(*out));
	uint64_t n = 0, cd = 0;
	sg_status st = find_central(data, size, what, &n, &cd);
	if (st) return st;
	sg_npz z = {0};
	z.tensors = sg_calloc(n ? (size_t)n : 1, sizeof(sg_tensor));
	if (!z.tensors) return sg_error(SG_ERR_NOMEM, "npz: %s: %llu entries", what, (unsigned long long)n);
	uint64_t o = cd;
	for (uint64_t i = 0; i < n && !st; i++) {
		if (o > size || size - o < 46 || rd32(data + o) != SIG_CENTRAL) {
			st = sg_error(SG_ERR_FORMAT, "npz: %s: central entry %llu at %llu is not a zip entry", what,
				      (unsigned long long)i, (unsigned long long)o);
			break;
		}
		const uint8_t *e = data + o;
		uint32_t flags = rd16(e + 8), method = rd16(e + 10), nl = rd16(e + 28), xl = rd16(e + 30), cl = rd16(e + 32);
		uint64_t csize = rd32(e + 20), usize = rd32(e + 24), loc = rd32(e + 42);
		if (size - o - 46 < (uint64_t)nl + xl + cl) {
			st = sg_error(SG_ERR_FORMAT, "npz: %s: central entry %llu runs past the file", what, (unsigned long long)i);
			break;
		}
		zip64_extra(e + 46 + nl, xl, &usize, &csize, &loc);
		sg_tensor *t = &z.tensors[z.n_tensors];
		int named = nl > 4 && !memcmp(e + 46 + nl - 4, ".npy", 4);
		t->name = sg_malloc(nl + 1u);
		if (!t->name) {
			st = sg_error(SG_ERR_NOMEM, "npz: %s: an entry name", what);
			break;
		}
		memcpy(t->name, e + 46, nl);
		t->name[named ? nl - 4 : nl] = 0;
		t->file = file;
		z.n_tensors++;
		if (!named || memchr(t->name, 0, named ? nl - 4 : nl)) {
			st = sg_error(SG_ERR_FORMAT, "npz: %s: entry '%s' is not a .npy array", what, t->name);
			break;
		}
		if (flags & 1) {
			st = sg_error(SG_ERR_UNSUPPORTED, "npz: %s: entry '%s' is encrypted", what, t->name);
			break;
		}
		if (method != 0 || csize != usize) {
			st = sg_error(SG_ERR_UNSUPPORTED,
				      "npz: %s: entry '%s' is compressed (zip method %u): only stored entries are read in place "
				      "(np.savez writes them; np.savez_compressed does not)",
				      what, t->name, method);
			break;
		}
		if (loc > size || size - loc < 30 || rd32(data + loc) != SIG_LOCAL) {
			st = sg_error(SG_ERR_FORMAT, "npz: %s: entry '%s': no local header at %llu (file size %zu)", what, t->name,
				      (unsigned long long)loc, size);
			break;
		}
		uint64_t start = loc + 30 + rd16(data + loc + 26) + rd16(data + loc + 28);
		if (start > size || usize > size - start) {
			st = sg_error(SG_ERR_FORMAT, "npz: %s: entry '%s': %llu bytes at %llu run past the file size %zu", what, t->name,
				      (unsigned long long)usize, (unsigned long long)start, size);
			break;
		}
		t->offset = start;
		st = parse_npy(data + start, usize, what, t);
		if (!st) t->offset = (uint64_t)(t->data - data);
		o += 46 + (uint64_t)nl + xl + cl;
	}
	if (st) {
		sg_npz_free(&z);
		return st;
	}
	*out = z;
	return SG_OK;
}
