package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
)

// keyring checks Bearer API keys. Keys are kept as SHA-256 digests and
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
// configured everything passes with an empty salt.
func (k *keyring) check(r *http.Request) (string, *APIError) {
	if !k.enabled() {
		return "", nil
	}
	if n := len(r.Header.Values("Authorization")); n > 1 {
		// Proxies and servers may disagree on which of several is the one;
		// refusing keeps them from disagreeing about who is authenticated.
		return "", &APIError{Status: http.StatusBadRequest, Type: errInvalidRequest, Code: "duplicate_authorization",
			Message: fmt.Sprintf("%d Authorization headers: send exactly one", n)}
	}
	auth := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(auth, " ")
	if auth == "" {
		return "", &APIError{Status: http.StatusUnauthorized, Type: errAuthentication, Code: "missing_api_key",
			Message: "missing API key: send it as 'Authorization: Bearer <key>'"}
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", &APIError{Status: http.StatusUnauthorized, Type: errAuthentication, Code: "invalid_api_key",
			Message: "the Authorization header must be 'Bearer <key>'"}
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(token)))
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
