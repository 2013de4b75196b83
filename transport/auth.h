/*
 * transport/auth: the job secret and the connection handshake MACs.
 *
 * Each connection starts with HELLO {src, dst, nonce, mac}; the receiver
 * checks mac = HMAC-SHA256(secret, "ember-hello" | src | dst | nonce) before
 * any handler may run for that connection, and answers with its own MAC over
 * both nonces, so each side proves it holds the secret.
 */
#ifndef EMBER_TP_AUTH_H
#define EMBER_TP_AUTH_H

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#define TP_AUTH_NONCE_SIZE 16
#define TP_AUTH_MAC_SIZE   32
#define TP_AUTH_MAX_SECRET 1024

typedef struct {
    uint8_t bytes[TP_AUTH_MAX_SECRET];
    size_t length;
} tp_secret_t;

/**
 * Load the secret: explicit bytes, else EMBER_SECRET_FILE (which must not be
 * accessible to group/others), else EMBER_SECRET (hex).  With none of them
 * the secret is empty and a warning says connections are unauthenticated.
 */
ember_status_t tp_auth_load_secret(const uint8_t *bytes, size_t length, tp_secret_t *secret);

/** Fill @nonce with random bytes. */
ember_status_t tp_auth_nonce(uint8_t nonce[TP_AUTH_NONCE_SIZE]);

/** mac = HMAC(secret, label | src | dst | nonce_a | nonce_b). */
void tp_auth_mac(const tp_secret_t *secret, const char *label, uint32_t src, uint32_t dst,
                 const uint8_t nonce_a[TP_AUTH_NONCE_SIZE],
                 const uint8_t nonce_b[TP_AUTH_NONCE_SIZE], uint8_t mac[TP_AUTH_MAC_SIZE]);

/* One piece of a message a MAC covers. */
typedef struct {
    const void *data;
    size_t length;
} tp_auth_part_t;

/** mac = HMAC-SHA256(secret, parts[0] | parts[1] | ...). */
void tp_auth_hmac(const tp_secret_t *secret, const tp_auth_part_t *parts, size_t nparts,
                  uint8_t mac[TP_AUTH_MAC_SIZE]);

/** digest = SHA-256(@data): how a worker address enters a MAC. */
void tp_auth_digest(const void *data, size_t length, uint8_t digest[TP_AUTH_MAC_SIZE]);

/**
 * Seal @length bytes of @data into @out (as long) for holders of the secret
 * only: XOR with a key stream of HMAC(secret, "ember-seal-stream" | @label |
 * @context | nonce | block), then mac = HMAC(secret, "ember-seal" | @label |
 * @context | nonce | the sealed bytes).  @nonce is fresh per seal.
 */
void tp_auth_seal(const tp_secret_t *secret, const char *label, uint32_t context,
                  const uint8_t nonce[TP_AUTH_NONCE_SIZE], const void *data, size_t length,
                  void *out, uint8_t mac[TP_AUTH_MAC_SIZE]);

/** Check @mac over @sealed and open it into @out; 1 when it proves the
 * secret (and @out holds the data), else 0 (@out unspecified). */
int tp_auth_unseal(const tp_secret_t *secret, const char *label, uint32_t context,
                   const uint8_t nonce[TP_AUTH_NONCE_SIZE], const void *sealed, size_t length,
                   const uint8_t mac[TP_AUTH_MAC_SIZE], void *out);

/** Constant-time comparison of two MACs; 1 when equal. */
int tp_auth_mac_equal(const uint8_t a[TP_AUTH_MAC_SIZE], const uint8_t b[TP_AUTH_MAC_SIZE]);

#endif
