/*
 * tests/install: a header as a public one would be, declaring a function
 * libember does not have: install.exports.finds_missing passes it to the
 * export check, which must name the function and this file.
 */
#ifndef EMBER_EXPORTS_MISSING_H
#define EMBER_EXPORTS_MISSING_H

/** Nowhere defined. */
int ember_exports_missing(void);

#endif
