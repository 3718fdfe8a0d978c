package daemon

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/bleve"
)

// SearchPath is the daemon's HTTP route answering queries from its bleve
// sinks: GET /search?q=QUERY[&sink=NAME][&table=schema.table][&size=N][&from=N]
// returns a bleve.SearchResult as JSON. sink may be left out when the
// pipeline has one bleve sink. The running daemon holds the index, so
// `sluice search` asks it here.
const SearchPath = "/search"

// searchHandler serves SearchPath over the pipeline's bleve sinks.
func searchHandler(sinks []pipeline.NamedSink) http.Handler {
	indexes := map[string]*bleve.Sink{}
	var only *bleve.Sink
	for _, s := range sinks {
		if b, ok := s.Sink.(*bleve.Sink); ok {
			indexes[s.Name] = b
			only = b
		}
	}
	if len(indexes) != 1 {
		only = nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		idx := only
		if name := q.Get("sink"); name != "" {
			idx = indexes[name]
		}
		if idx == nil {
			names := make([]string, 0, len(indexes))
			for n := range indexes {
				names = append(names, n)
			}
			httpError(w, http.StatusNotFound, "no such bleve sink; name one of ["+strings.Join(names, ", ")+"] with sink=")
			return
		}
		req := bleve.SearchRequest{Query: q.Get("q"), Table: q.Get("table")}
		for _, p := range []struct {
			name string
			dst  *int
		}{{"size", &req.Size}, {"from", &req.From}} {
			if v := q.Get(p.name); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					httpError(w, http.StatusBadRequest, p.name+" must be a non-negative integer")
					return
				}
				*p.dst = n
			}
		}
		res, err := idx.Search(r.Context(), req)
		switch {
		case errors.Is(err, bleve.ErrQuery):
			httpError(w, http.StatusBadRequest, err.Error())
			return
		case errors.Is(err, bleve.ErrClosed):
			httpError(w, http.StatusServiceUnavailable, err.Error())
			return
		case err != nil:
			httpError(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	})
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
