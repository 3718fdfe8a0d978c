package obs

import (
	"encoding/json"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// Mask replaces every secret Redact finds.
const Mask = "xxxxx"

// MinSecretLen is the shortest string RegisterSecret accepts: masking every
// occurrence of one or two characters would garble every log line.
const MinSecretLen = 3

var secrets struct {
	mu  sync.Mutex
	set map[string]struct{}
	rep atomic.Pointer[strings.Replacer]
}

// RegisterSecret makes Redact (and so every logger from NewLogger, /readyz
// and /status) mask s wherever it appears, also in its URL-escaped and
// JSON-escaped forms. Register every password and token read from the
// configuration. It is safe for concurrent use; secrets stay registered for
// the life of the process. Strings shorter than MinSecretLen are ignored.
func RegisterSecret(s string) {
	if len(s) < MinSecretLen {
		return
	}
	variants := []string{s, url.QueryEscape(s), url.PathEscape(s)}
	if b, err := json.Marshal(s); err == nil {
		variants = append(variants, string(b[1:len(b)-1]))
	}
	secrets.mu.Lock()
	defer secrets.mu.Unlock()
	if secrets.set == nil {
		secrets.set = map[string]struct{}{}
	}
	for _, v := range variants {
		secrets.set[v] = struct{}{}
	}
	all := make([]string, 0, len(secrets.set))
	for v := range secrets.set {
		all = append(all, v)
	}
	// Longest first, so a secret containing another is masked whole.
	sort.Slice(all, func(i, j int) bool {
		if len(all[i]) != len(all[j]) {
			return len(all[i]) > len(all[j])
		}
		return all[i] < all[j]
	})
	pairs := make([]string, 0, 2*len(all))
	for _, v := range all {
		pairs = append(pairs, v, Mask)
	}
	secrets.rep.Store(strings.NewReplacer(pairs...))
}

var (
	// key=value DSNs and query strings: password=..., sslpassword='...'.
	kvRe = regexp.MustCompile(`(?i)\b([\w.-]*(?:password|passwd|pwd))(\s*=\s*)('[^']*'|"[^"]*"|[^\s&;,'"]*)`)
	// JSON: "password": "...".
	jsonRe = regexp.MustCompile(`(?i)("[\w.-]*(?:password|passwd|pwd)"\s*:\s*)"(?:[^"\\]|\\.)*"`)
	// Go MySQL DSNs without a scheme: user:pass@tcp(host:3306)/db.
	mysqlRe = regexp.MustCompile(`([^\s:/@"'=]+):([^\s"']*?)@(tcp6?|udp|unix)\(`)
)

// Redact returns s with secrets masked: registered secrets (RegisterSecret),
// passwords in URL DSNs (postgres://user:secret@host → postgres://user:xxxxx@host),
// in key=value DSNs and query strings (password=secret → password=xxxxx), in
// JSON ("password": "xxxxx") and in Go MySQL DSNs (user:xxxxx@tcp(host)).
// Use it for text printed outside the loggers of NewLogger. Safe for
// concurrent use.
func Redact(s string) string {
	if s == "" {
		return s
	}
	if rep := secrets.rep.Load(); rep != nil {
		s = rep.Replace(s)
	}
	if strings.Contains(s, "://") {
		s = redactURLs(s)
	}
	if strings.IndexByte(s, '@') >= 0 && strings.IndexByte(s, '(') >= 0 {
		s = mysqlRe.ReplaceAllString(s, "${1}:"+Mask+"@${3}(")
	}
	if strings.IndexByte(s, '=') >= 0 {
		s = kvRe.ReplaceAllString(s, "${1}${2}"+Mask)
	}
	if strings.Contains(s, `":`) || strings.Contains(s, `" :`) {
		s = jsonRe.ReplaceAllString(s, `${1}"`+Mask+`"`)
	}
	return s
}

// redactURLs masks the password of every scheme://user:password@host in s,
// splitting user info from host at the last '@' of the authority as URL
// parsers do, so passwords containing '@' are masked whole.
func redactURLs(s string) string {
	var b strings.Builder
	i := 0
	for {
		j := strings.Index(s[i:], "://")
		if j < 0 {
			b.WriteString(s[i:])
			return b.String()
		}
		start := i + j + 3
		end := start
		for end < len(s) && !authorityEnd(s[end]) {
			end++
		}
		auth := s[start:end]
		if at := strings.LastIndexByte(auth, '@'); at > 0 {
			if c := strings.IndexByte(auth[:at], ':'); c >= 0 && c+1 < at {
				b.WriteString(s[i : start+c+1])
				b.WriteString(Mask)
				b.WriteString(s[start+at : end])
				i = end
				continue
			}
		}
		b.WriteString(s[i:end])
		i = end
	}
}

func authorityEnd(c byte) bool {
	switch c {
	case '/', '?', '#', ' ', '\t', '\n', '\r', '"', '\'', '`', '<', '>':
		return true
	}
	return false
}
