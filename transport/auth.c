/* transport/auth: job secret loading and HMAC-SHA256 handshake MACs. */
#include "transport/auth.h"

#include <ember/config.h>
#include <ember/log.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

static int hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    return (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
}

/* Hex text becomes bytes; anything else is taken verbatim. */
static void secret_from_text(const char *text, size_t length, tp_secret_t *secret)
{
    int is_hex = length > 0 && length % 2 == 0;
    for (size_t i = 0; is_hex && i < length; i++)
        is_hex = hex_value((unsigned char)text[i]) >= 0;
    if (is_hex) {
        secret->length = length / 2;
        for (size_t i = 0; i < secret->length; i++)
            secret->bytes[i] = (uint8_t)(hex_value((unsigned char)text[2 * i]) << 4 |
                                         hex_value((unsigned char)text[2 * i + 1]));
    } else {
        secret->length = length;
        memcpy(secret->bytes, text, length);
    }
}

static ember_status_t secret_from_file(const char *path, tp_secret_t *secret)
{
    char text[2 * TP_AUTH_MAX_SECRET + 2];
    struct stat st;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        ember_error("auth", "cannot open secret file %s: %s", path, strerror(errno));
        return EMBER_ERR_IO;
    }
    if (fstat(fd, &st) != 0 || (st.st_mode & 077) != 0) {
        ember_error("auth",
                    "secret file %s is accessible to group/others "
                    "(mode %04o); run chmod 600 on it",
                    path, (unsigned)(st.st_mode & 07777));
        close(fd);
        return EMBER_ERR_AUTH;
    }
    n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n <= 0) {
        ember_error("auth", "secret file %s is empty or unreadable", path);
        return EMBER_ERR_AUTH;
    }
    while (n > 0 && isspace((unsigned char)text[n - 1]))
        n--;
    if ((size_t)n > 2 * TP_AUTH_MAX_SECRET) {
        ember_error("auth", "secret file %s is longer than %d bytes", path, TP_AUTH_MAX_SECRET);
        return EMBER_ERR_AUTH;
    }
    secret_from_text(text, (size_t)n, secret);
    return EMBER_OK;
}

ember_status_t tp_auth_load_secret(const uint8_t *bytes, size_t length, tp_secret_t *secret)
{
    const char *file = ember_config_str("EMBER_SECRET_FILE");
    const char *text = ember_config_str("EMBER_SECRET");

    memset(secret, 0, sizeof(*secret));
    if (bytes) {
        if (length > TP_AUTH_MAX_SECRET)
            return EMBER_ERR_INVALID_PARAM;
        memcpy(secret->bytes, bytes, length);
        secret->length = length;
        return EMBER_OK;
    }
    if (file && *file)
        return secret_from_file(file, secret);
    if (text && *text) {
        size_t n = strlen(text);
        if (n > 2 * TP_AUTH_MAX_SECRET)
            return EMBER_ERR_INVALID_PARAM;
        secret_from_text(text, n, secret);
        return EMBER_OK;
    }
    ember_warn("auth", "no job secret (EMBER_SECRET_FILE): connections are not "
                       "authenticated; ember-run and slurm/hybrid.sbatch set one");
    return EMBER_OK;
}

ember_status_t tp_auth_nonce(uint8_t nonce[TP_AUTH_NONCE_SIZE])
{
    if (getrandom(nonce, TP_AUTH_NONCE_SIZE, 0) != TP_AUTH_NONCE_SIZE) {
        ember_error("auth", "getrandom failed: %s", strerror(errno));
        return EMBER_ERR_IO;
    }
    return EMBER_OK;
}

void tp_auth_mac(const tp_secret_t *secret, const char *label, uint32_t src, uint32_t dst,
                 const uint8_t nonce_a[TP_AUTH_NONCE_SIZE],
                 const uint8_t nonce_b[TP_AUTH_NONCE_SIZE], uint8_t mac[TP_AUTH_MAC_SIZE])
{
    uint8_t message[64 + 8 + 2 * TP_AUTH_NONCE_SIZE];
    size_t label_length = strlen(label), n = 0;
    unsigned mac_length = TP_AUTH_MAC_SIZE;

    if (label_length > 64)
        label_length = 64;
    memcpy(message, label, label_length);
    n += label_length;
    memcpy(message + n, &src, 4);
    memcpy(message + n + 4, &dst, 4);
    n += 8;
    memcpy(message + n, nonce_a, TP_AUTH_NONCE_SIZE);
    n += TP_AUTH_NONCE_SIZE;
    memcpy(message + n, nonce_b, TP_AUTH_NONCE_SIZE);
    n += TP_AUTH_NONCE_SIZE;
    HMAC(EVP_sha256(), secret->bytes, (int)secret->length, message, n, mac, &mac_length);
}

/* The HMAC implementation, fetched once (the store's thread and the main
 * thread both use it). */
static EVP_MAC *hmac_impl;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;

static void hmac_fetch(void)
{
    hmac_impl = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

void tp_auth_hmac(const tp_secret_t *secret, const tp_auth_part_t *parts, size_t nparts,
                  uint8_t mac[TP_AUTH_MAC_SIZE])
{
    OSSL_PARAM params[] = {
            OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
            OSSL_PARAM_construct_end()};
    EVP_MAC_CTX *ctx = NULL;
    size_t length = 0;
    int ok;

    pthread_once(&hmac_once, hmac_fetch);
    ok = hmac_impl && (ctx = EVP_MAC_CTX_new(hmac_impl)) &&
         EVP_MAC_init(ctx, secret->bytes, secret->length, params);
    for (size_t i = 0; ok && i < nparts; i++)
        ok = parts[i].length == 0 || EVP_MAC_update(ctx, parts[i].data, parts[i].length);
    ok = ok && EVP_MAC_final(ctx, mac, &length, TP_AUTH_MAC_SIZE) && length == TP_AUTH_MAC_SIZE;
    EVP_MAC_CTX_free(ctx);
    /* Without a MAC nothing may pass: a random one matches nothing. */
    if (!ok && getrandom(mac, TP_AUTH_MAC_SIZE, 0) != TP_AUTH_MAC_SIZE)
        memset(mac, 0xa5, TP_AUTH_MAC_SIZE);
}

void tp_auth_digest(const void *data, size_t length, uint8_t digest[TP_AUTH_MAC_SIZE])
{
    unsigned int n = TP_AUTH_MAC_SIZE;
    if (!EVP_Digest(data, length, digest, &n, EVP_sha256(), NULL))
        memset(digest, 0, TP_AUTH_MAC_SIZE);
}

int tp_auth_mac_equal(const uint8_t a[TP_AUTH_MAC_SIZE], const uint8_t b[TP_AUTH_MAC_SIZE])
{
    return CRYPTO_memcmp(a, b, TP_AUTH_MAC_SIZE) == 0;
}

/* XOR @length bytes of @in with the seal's key stream into @out. */
static void seal_stream(const tp_secret_t *secret, const char *label, uint32_t context,
                        const uint8_t nonce[TP_AUTH_NONCE_SIZE], const uint8_t *in, size_t length,
                        uint8_t *out)
{
    uint8_t block[TP_AUTH_MAC_SIZE];
    for (uint64_t index = 0; index * sizeof(block) < length; index++) {
        tp_auth_part_t parts[] = {{"ember-seal-stream", 17},
                                  {label, strlen(label)},
                                  {&context, sizeof(context)},
                                  {nonce, TP_AUTH_NONCE_SIZE},
                                  {&index, sizeof(index)}};
        tp_auth_hmac(secret, parts, sizeof(parts) / sizeof(parts[0]), block);
        size_t at = (size_t)index * sizeof(block);
        size_t n = length - at < sizeof(block) ? length - at : sizeof(block);
        for (size_t i = 0; i < n; i++)
            out[at + i] = in[at + i] ^ block[i];
    }
}

static void seal_mac(const tp_secret_t *secret, const char *label, uint32_t context,
                     const uint8_t nonce[TP_AUTH_NONCE_SIZE], const void *sealed, size_t length,
                     uint8_t mac[TP_AUTH_MAC_SIZE])
{
    tp_auth_part_t parts[] = {{"ember-seal", 10},
                              {label, strlen(label)},
                              {&context, sizeof(context)},
                              {nonce, TP_AUTH_NONCE_SIZE},
                              {sealed, length}};
    tp_auth_hmac(secret, parts, sizeof(parts) / sizeof(parts[0]), mac);
}

void tp_auth_seal(const tp_secret_t *secret, const char *label, uint32_t context,
                  const uint8_t nonce[TP_AUTH_NONCE_SIZE], const void *data, size_t length,
                  void *out, uint8_t mac[TP_AUTH_MAC_SIZE])
{
    seal_stream(secret, label, context, nonce, data, length, out);
    seal_mac(secret, label, context, nonce, out, length, mac);
}

int tp_auth_unseal(const tp_secret_t *secret, const char *label, uint32_t context,
                   const uint8_t nonce[TP_AUTH_NONCE_SIZE], const void *sealed, size_t length,
                   const uint8_t mac[TP_AUTH_MAC_SIZE], void *out)
{
    uint8_t expected[TP_AUTH_MAC_SIZE];
    seal_mac(secret, label, context, nonce, sealed, length, expected);
    if (!tp_auth_mac_equal(expected, mac))
        return 0;
    seal_stream(secret, label, context, nonce, sealed, length, out);
    return 1;
}
