package schema

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/hamba/avro/v2"
)

// Registry is a schema registry: the subset of the Confluent API sluice uses.
//
// Register returns the id of schema under subject, registering it as the
// subject's next version when new (and, as a registry does, refusing a
// schema incompatible under the subject's compatibility level).
// SetCompatibility sets a subject's level (NONE, BACKWARD,
// BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE).
// Compatible reports whether schema could be registered under subject, with
// a reason when not; a subject without versions accepts any schema.
type Registry interface {
	Register(ctx context.Context, subject string, schema string) (id int, err error)
	SetCompatibility(ctx context.Context, subject, level string) error
	Compatible(ctx context.Context, subject, schema string) (bool, string, error)
}

// Compatibility levels.
const (
	CompatNone               = "NONE"
	CompatBackward           = "BACKWARD"
	CompatBackwardTransitive = "BACKWARD_TRANSITIVE"
	CompatForward            = "FORWARD"
	CompatForwardTransitive  = "FORWARD_TRANSITIVE"
	CompatFull               = "FULL"
	CompatFullTransitive     = "FULL_TRANSITIVE"
)

// MemRegistry is an in-memory Registry for tests. Ids start at 1 and are
// global: the same schema text gets the same id under every subject, as in
// the Confluent registry. Each subject keeps its versions (1, 2, …);
// registering a subject's existing schema returns its id without a new
// version. The default level is BACKWARD.
//
// Compatibility uses hamba's Avro schema resolution check: BACKWARD means
// the new schema can read data written with the latest version (against
// every version when transitive), FORWARD the reverse, FULL both. Unlike the
// Confluent registry it compares schema texts byte for byte (no
// normalisation), so differently formatted equal schemas get new ids.
type MemRegistry struct {
	mu       sync.Mutex
	ids      map[string]int    // schema text → id
	texts    []string          // id-1 → schema text
	versions map[string][]int  // subject → ids by version
	levels   map[string]string // subject → level
	Default  string            // level of subjects without their own; "" → BACKWARD
}

// NewMemRegistry returns an empty registry.
func NewMemRegistry() *MemRegistry { return &MemRegistry{} }

// Register implements Registry.
func (r *MemRegistry) Register(ctx context.Context, subject, schema string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	if id, ok := r.ids[schema]; ok {
		for _, v := range r.versions[subject] {
			if v == id {
				return id, nil
			}
		}
	}
	ok, reason, err := r.compatible(subject, schema)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("schema: subject %q: schema incompatible (%s): %s", subject, r.level(subject), reason)
	}
	id, known := r.ids[schema]
	if !known {
		r.texts = append(r.texts, schema)
		id = len(r.texts)
		r.ids[schema] = id
	}
	r.versions[subject] = append(r.versions[subject], id)
	return id, nil
}

// SetCompatibility implements Registry.
func (r *MemRegistry) SetCompatibility(ctx context.Context, subject, level string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	level = strings.ToUpper(level)
	switch level {
	case CompatNone, CompatBackward, CompatBackwardTransitive, CompatForward, CompatForwardTransitive, CompatFull, CompatFullTransitive:
	default:
		return fmt.Errorf("schema: unknown compatibility level %q", level)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	r.levels[subject] = level
	return nil
}

// Compatible implements Registry.
func (r *MemRegistry) Compatible(ctx context.Context, subject, schema string) (bool, string, error) {
	if err := ctx.Err(); err != nil {
		return false, "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	return r.compatible(subject, schema)
}

// Schema returns the text registered under id.
func (r *MemRegistry) Schema(id int) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id < 1 || id > len(r.texts) {
		return "", false
	}
	return r.texts[id-1], true
}

// SchemaByID returns the schema text registered under id, as a
// registry's GET /schemas/ids/{id} does.
func (r *MemRegistry) SchemaByID(_ context.Context, id int) (string, error) {
	if text, ok := r.Schema(id); ok {
		return text, nil
	}
	return "", fmt.Errorf("schema id %d not found", id)
}

// Versions returns the ids of subject's versions, oldest first.
func (r *MemRegistry) Versions(subject string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.versions[subject]...)
}

// Subjects returns the registered subjects, sorted.
func (r *MemRegistry) Subjects() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.versions))
	for s := range r.versions {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func (r *MemRegistry) init() {
	if r.ids == nil {
		r.ids = map[string]int{}
		r.versions = map[string][]int{}
		r.levels = map[string]string{}
	}
}

func (r *MemRegistry) level(subject string) string {
	if l, ok := r.levels[subject]; ok {
		return l
	}
	if r.Default != "" {
		return strings.ToUpper(r.Default)
	}
	return CompatBackward
}

func (r *MemRegistry) compatible(subject, text string) (bool, string, error) {
	next, err := ParseSchemaText(text)
	if err != nil {
		return false, "", fmt.Errorf("schema: subject %q: invalid schema: %w", subject, err)
	}
	level := r.level(subject)
	vers := r.versions[subject]
	if level == CompatNone || len(vers) == 0 {
		return true, "", nil
	}
	if !strings.HasSuffix(level, "_TRANSITIVE") {
		vers = vers[len(vers)-1:]
	}
	backward := strings.HasPrefix(level, "BACKWARD") || strings.HasPrefix(level, "FULL")
	forward := strings.HasPrefix(level, "FORWARD") || strings.HasPrefix(level, "FULL")
	check := avro.NewSchemaCompatibility()
	for _, id := range vers {
		old, err := ParseSchemaText(r.texts[id-1])
		if err != nil {
			return false, "", err
		}
		if backward {
			if err := check.Compatible(next, old); err != nil {
				return false, fmt.Sprintf("new schema cannot read data written with id %d: %v", id, err), nil
			}
		}
		if forward {
			if err := check.Compatible(old, next); err != nil {
				return false, fmt.Sprintf("schema id %d cannot read data written with the new schema: %v", id, err), nil
			}
		}
	}
	return true, "", nil
}
