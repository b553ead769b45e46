package manifest

import (
	"container/list"
	"context"
	"sync"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
)

// Cache holds decoded indexes and pages by their sha256: they are
// immutable, so a digest names one content for good (DESIGN.md "Dataset
// versions": manifests are read by digest, so they can be cached). It
// holds up to a bound of entries counted across everything cached (an
// index counts its pages and inline entries), evicting the least recently
// used. A nil *Cache caches nothing. Safe for concurrent use; two callers
// missing the same digest at once both read it.
type Cache struct {
	max int

	mu    sync.Mutex
	cost  int
	order *list.List // of *cached, most recently used first
	items map[string]*list.Element
}

type cached struct {
	sha   string
	index *Index
	page  []Entry
	cost  int
}

// NewCache returns a Cache of up to maxEntries entries (at least 1).
func NewCache(maxEntries int) *Cache {
	return &Cache{max: max(maxEntries, 1), order: list.New(), items: map[string]*list.Element{}}
}

func (c *Cache) get(sha string) *cached {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[sha]
	if !ok {
		return nil
	}
	c.order.MoveToFront(el)
	return el.Value.(*cached)
}

func (c *Cache) put(it *cached) {
	if c == nil || it.cost > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[it.sha]; ok {
		return
	}
	c.items[it.sha] = c.order.PushFront(it)
	c.cost += it.cost
	for c.cost > c.max {
		old := c.order.Back()
		o := old.Value.(*cached)
		c.order.Remove(old)
		delete(c.items, o.sha)
		c.cost -= o.cost
	}
}

// Index returns the index obj names: cached by obj.SHA256, else
// LoadIndex. Errors: LoadIndex's.
func (c *Cache) Index(ctx context.Context, st objstore.Store, obj layout.Object) (*Index, error) {
	if it := c.get(obj.SHA256); it != nil && it.index != nil {
		return it.index, nil
	}
	ix, err := LoadIndex(ctx, st, obj)
	if err != nil {
		return nil, err
	}
	c.put(&cached{sha: obj.SHA256, index: ix, cost: 1 + len(ix.Pages) + len(ix.Entries)})
	return ix, nil
}

// Page returns the entries of page ref: cached by ref.SHA256, else
// LoadPage. Errors: LoadPage's.
func (c *Cache) Page(ctx context.Context, st objstore.Store, ref PageRef) ([]Entry, error) {
	if it := c.get(ref.SHA256); it != nil && it.page != nil {
		return it.page, nil
	}
	es, err := LoadPage(ctx, st, ref)
	if err != nil {
		return nil, err
	}
	c.put(&cached{sha: ref.SHA256, page: es, cost: len(es)})
	return es, nil
}

// Lookup returns the entry of path in the manifest obj names: the index,
// then at most one page, each from the cache when there. found is false
// when the manifest has no such path. Errors: as Index and Page.
func (c *Cache) Lookup(ctx context.Context, st objstore.Store, obj layout.Object, path string) (e Entry, found bool, err error) {
	ix, err := c.Index(ctx, st, obj)
	if err != nil {
		return Entry{}, false, err
	}
	page, inline, ok := ix.Locate(path)
	if !ok {
		return Entry{}, false, nil
	}
	if inline == nil {
		es, err := c.Page(ctx, st, ix.Pages[page])
		if err != nil {
			return Entry{}, false, err
		}
		if inline, ok = Find(es, path); !ok {
			return Entry{}, false, nil
		}
	}
	return *inline, true, nil
}

// All yields every entry of the manifest ix, reading pages through c
// (manifest.Index.All without caching when c is nil). A failure is yielded
// once, last.
func (c *Cache) All(ctx context.Context, st objstore.Store, ix *Index) func(yield func(Entry, error) bool) {
	return func(yield func(Entry, error) bool) {
		for _, e := range ix.Entries {
			if !yield(e, nil) {
				return
			}
		}
		for _, ref := range ix.Pages {
			es, err := c.Page(ctx, st, ref)
			if err != nil {
				yield(Entry{}, err)
				return
			}
			for _, e := range es {
				if !yield(e, nil) {
					return
				}
			}
		}
	}
}
