/* npz (a zip of .npy arrays, as np.savez writes it) on hand-built archives. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "formats/npz.h"

#define HAS(s) cr_expect(strstr(sg_last_error(), s) != NULL, "message: %s", sg_last_error())

typedef struct zbuf {
	uint8_t b[4096];
	size_t n;
	uint8_t cd[2048]; /* the central directory, appended at the end */
	size_t ncd;
	int entries;
} zbuf;

static void put(uint8_t *p, size_t *n, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++) p[(*n)++] = (uint8_t)(v >> (8 * i));
}

/* One stored entry "<name>.npy": a version-1 .npy header (dict padded with spaces to a multiple
 * of 64 bytes, as numpy does) and `data` bytes 0..data-1. method 8 claims deflate. */
static void entry(zbuf *z, const char *name, const char *dict, size_t data, int method)
{
	uint8_t npy[512];
	size_t k = 0;
	memcpy(npy, "\x93NUMPY\x01\x00", 8);
	size_t dl = strlen(dict), hl = dl + 1;
	while ((10 + hl) % 64) hl++;
	k = 8;
	put(npy, &k, hl, 2);
	memcpy(npy + k, dict, dl);
	memset(npy + k + dl, ' ', hl - dl - 1);
	npy[k + hl - 1] = '\n';
	k += hl;
	for (size_t i = 0; i < data; i++) npy[k++] = (uint8_t)i;
	char full[64];
	snprintf(full, sizeof(full), "%s.npy", name);
	size_t nl = strlen(full), loc = z->n;
	put(z->b, &z->n, 0x04034b50, 4);
	put(z->b, &z->n, 20, 2);
	put(z->b, &z->n, 0, 2);
	put(z->b, &z->n, (uint64_t)method, 2);
	put(z->b, &z->n, 0, 4); /* time, date */
	put(z->b, &z->n, 0, 4); /* crc (not checked) */
	put(z->b, &z->n, k, 4);
	put(z->b, &z->n, k, 4);
	put(z->b, &z->n, nl, 2);
	put(z->b, &z->n, 0, 2);
	memcpy(z->b + z->n, full, nl);
	z->n += nl;
	memcpy(z->b + z->n, npy, k);
	z->n += k;
	put(z->cd, &z->ncd, 0x02014b50, 4);
	put(z->cd, &z->ncd, 20, 2);
	put(z->cd, &z->ncd, 20, 2);
	put(z->cd, &z->ncd, 0, 2);
	put(z->cd, &z->ncd, (uint64_t)method, 2);
	put(z->cd, &z->ncd, 0, 4);
	put(z->cd, &z->ncd, 0, 4);
	put(z->cd, &z->ncd, k, 4);
	put(z->cd, &z->ncd, k, 4);
	put(z->cd, &z->ncd, nl, 2);
	put(z->cd, &z->ncd, 0, 2);
	put(z->cd, &z->ncd, 0, 2);
	put(z->cd, &z->ncd, 0, 2);
	put(z->cd, &z->ncd, 0, 2);
	put(z->cd, &z->ncd, 0, 4);
	put(z->cd, &z->ncd, loc, 4);
	memcpy(z->cd + z->ncd, full, nl);
	z->ncd += nl;
	z->entries++;
}

/* The central directory and the end record after the entries; the archive's size. */
static size_t finish(zbuf *z)
{
	size_t off = z->n;
	memcpy(z->b + z->n, z->cd, z->ncd);
	z->n += z->ncd;
	put(z->b, &z->n, 0x06054b50, 4);
	put(z->b, &z->n, 0, 4);
	put(z->b, &z->n, (uint64_t)z->entries, 2);
	put(z->b, &z->n, (uint64_t)z->entries, 2);
	put(z->b, &z->n, z->ncd, 4);
	put(z->b, &z->n, off, 4);
	put(z->b, &z->n, 0, 2);
	return z->n;
}

static zbuf *two_arrays(void)
{
	static zbuf z;
	memset(&z, 0, sizeof(z));
	entry(&z, "encoder.conv1.weight", "{'descr': '<f2', 'fortran_order': False, 'shape': (4, 3, 2), }", 48, 0);
	entry(&z, "alignment_heads", "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 2), }", 16, 0);
	finish(&z);
	return &z;
}

Test(npz, reads_names_types_and_shapes_innermost_first)
{
	zbuf *z = two_arrays();
	sg_npz a;
	cr_assert_eq(sg_npz_parse(z->b, z->n, "w.npz", 3, &a), SG_OK, "%s", sg_last_error());
	cr_assert_eq(a.n_tensors, 2);
	cr_expect_str_eq(a.tensors[0].name, "encoder.conv1.weight");
	cr_expect_eq(a.tensors[0].type, SG_TYPE_F16);
	cr_expect_eq(a.tensors[0].n_dims, 3);
	cr_expect(a.tensors[0].ne[0] == 2 && a.tensors[0].ne[1] == 3 && a.tensors[0].ne[2] == 4);
	cr_expect_eq(a.tensors[0].nbytes, 48);
	cr_expect_eq(a.tensors[0].data[0], 0);
	cr_expect_eq(a.tensors[0].data[47], 47);
	cr_expect_eq(a.tensors[0].file, 3);
	cr_expect_eq((size_t)(a.tensors[0].data - z->b), a.tensors[0].offset);
	cr_expect_str_eq(a.tensors[1].name, "alignment_heads");
	cr_expect_eq(a.tensors[1].type, SG_TYPE_I64);
	cr_expect(a.tensors[1].ne[0] == 2 && a.tensors[1].ne[1] == 1);
	sg_npz_free(&a);
}

Test(npz, every_truncation_is_a_clean_error)
{
	zbuf *z = two_arrays();
	for (size_t n = 0; n < z->n; n++) {
		uint8_t *p = sg_malloc(n ? n : 1);
		memcpy(p, z->b, n);
		sg_npz a;
		cr_expect_neq(sg_npz_parse(p, n, "cut.npz", 0, &a), SG_OK, "%zu of %zu bytes parsed", n, z->n);
		cr_expect_eq(a.n_tensors, 0);
		sg_free(p);
	}
}

static sg_status one(const char *dict, size_t data, int method)
{
	static zbuf z;
	memset(&z, 0, sizeof(z));
	entry(&z, "w", dict, data, method);
	finish(&z);
	sg_npz a;
	sg_status st = sg_npz_parse(z.b, z.n, "w.npz", 0, &a);
	if (!st) sg_npz_free(&a);
	return st;
}

Test(npz, refuses_what_it_cannot_read_in_place_with_the_reason)
{
	cr_expect_eq(one("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 16, 8), SG_ERR_UNSUPPORTED);
	HAS("compressed");
	cr_expect_eq(one("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16, 0), SG_ERR_UNSUPPORTED);
	HAS("Fortran order");
	cr_expect_eq(one("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", 16, 0), SG_ERR_UNSUPPORTED);
	HAS("dtype '>f4'");
	cr_expect_eq(one("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, 0), SG_ERR_UNSUPPORTED);
	cr_expect_eq(one("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 16, 0), SG_ERR_FORMAT);
	HAS("needs 24 bytes, the entry holds 16");
	cr_expect_eq(one("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 2), }", 16, 0), SG_ERR_FORMAT);
	cr_expect_eq(one("{'descr': '<f4', 'shape': (2, 2), }", 16, 0), SG_ERR_FORMAT);
	cr_expect_eq(one("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4, 0), SG_OK); /* a scalar */
}

Test(npz, not_a_zip_says_so)
{
	const uint8_t junk[64] = "PK\x03\x04 but nothing else that a zip needs";
	sg_npz a;
	cr_expect_eq(sg_npz_parse(junk, sizeof(junk), "junk.npz", 0, &a), SG_ERR_FORMAT);
	HAS("no zip end-of-directory record");
}
