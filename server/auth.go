package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
)

// keyring checks API keys (Bearer or x-api-key). Keys are kept as SHA-256 digests and
// compared in constant time. Each key has its own prefix-cache salt, so
// tenants with different keys never share KV blocks.
type keyring struct {
	digests [][sha256.Size]byte
	salts   []string
}

func newKeyring(keys []string) *keyring {
	k := &keyring{}
	for _, key := range keys {
		d := sha256.Sum256([]byte(key))
		k.digests = append(k.digests, d)
		k.salts = append(k.salts, "key:"+hex.EncodeToString(d[:8]))
	}
	return k
}

func (k *keyring) enabled() bool { return len(k.digests) > 0 }

// check authenticates r and returns the key's cache salt; with no keys
// configured everything passes with an empty salt. The key comes as
// "Authorization: Bearer <key>" (OpenAI's clients) or "x-api-key: <key>"
// (Anthropic's); a request may send both only with the same key: two
// different keys are refused with 400 conflicting_api_keys, as a request
// error (which key the client meant is ambiguous) rather than a failed
// authentication, like two Authorization headers.
func (k *keyring) check(r *http.Request) (string, *APIError) {
	if !k.enabled() {
		return "", nil
	}
	for _, h := range []string{"Authorization", "X-Api-Key"} {
		if n := len(r.Header.Values(h)); n > 1 {
			// Proxies and servers may disagree on which of several is the
			// one; refusing keeps them from disagreeing about who is
			// authenticated.
			return "", &APIError{Status: http.StatusBadRequest, Type: errInvalidRequest, Code: "duplicate_authorization",
				Message: fmt.Sprintf("%d %s headers: send exactly one", n, h)}
		}
	}
	auth := r.Header.Get("Authorization")
	xkey, hasX := strings.TrimSpace(r.Header.Get("X-Api-Key")), len(r.Header.Values("X-Api-Key")) > 0
	var token string
	switch scheme, tok, ok := strings.Cut(auth, " "); {
	case auth == "" && !hasX:
		return "", &APIError{Status: http.StatusUnauthorized, Type: errAuthentication, Code: "missing_api_key",
			Message: "missing API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'"}
	case auth == "":
		token = xkey
	case !ok || !strings.EqualFold(scheme, "Bearer"):
		return "", &APIError{Status: http.StatusUnauthorized, Type: errAuthentication, Code: "invalid_api_key",
			Message: "the Authorization header must be 'Bearer <key>'"}
	default:
		token = strings.TrimSpace(tok)
		if hasX && subtle.ConstantTimeCompare([]byte(token), []byte(xkey)) != 1 {
			return "", &APIError{Status: http.StatusBadRequest, Type: errInvalidRequest, Code: "conflicting_api_keys",
				Message: "the Authorization and x-api-key headers hold different keys: send one key"}
		}
	}
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range k.digests {
		if subtle.ConstantTimeCompare(d[:], k.digests[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", &APIError{Status: http.StatusUnauthorized, Type: errAuthentication, Code: "invalid_api_key",
			Message: "invalid API key"}
	}
	return k.salts[found], nil
}
