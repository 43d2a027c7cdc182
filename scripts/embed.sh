#!/bin/sh
# embed.sh NAME FILE: the bytes of FILE as a C array NAME[] (a NUL added after them) and its
# length NAME_len, on stdout. Plain POSIX tools (od, sed, wc), so a fresh system builds it.
set -e
name=$1
file=$2
echo "/* generated from $file by scripts/embed.sh: do not edit */"
echo "static const unsigned char ${name}[] = {"
od -An -v -tx1 "$file" | sed 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'
echo "0x00};"
echo "static const size_t ${name}_len = $(wc -c < "$file");"
