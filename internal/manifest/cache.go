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
// holds up to a bound in bytes (the decoded size of what it holds: its
// strings and fixed-size parts, decodedBytes), evicting the least recently used.
// All does not cache the pages of a manifest larger than the bound. A nil
// *Cache caches nothing. Safe for concurrent use; two callers missing the
// same digest at once both read it.
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

// NewCache returns a Cache of up to maxBytes bytes (at least 1).
func NewCache(maxBytes int) *Cache {
	return &Cache{max: max(maxBytes, 1), order: list.New(), items: map[string]*list.Element{}}
}

// fixedCost is what decodedBytes counts for each entry or page line beside its
// strings: the struct (five or six string headers and the integers), an
// allocation's rounding and the cache's own bookkeeping, in bytes.
const fixedCost = 128

// decodedBytes returns the bytes a Cache counts for a decoded index (page nil;
// its inline entries counted with it) or page (ix nil): for each entry or
// page line, its strings' lengths plus fixedCost.
func decodedBytes(ix *Index, page []Entry) int {
	n := fixedCost
	if ix != nil {
		for _, p := range ix.Pages {
			n += fixedCost + len(p.First) + len(p.Last) + len(p.Key) + len(p.SHA256) + len(p.ETag)
		}
		page = ix.Entries
	}
	for _, e := range page {
		n += fixedCost + len(e.Path) + len(e.SHA256) + len(e.Key) + len(e.ETag) + len(e.ContentType)
	}
	return n
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
	c.put(&cached{sha: obj.SHA256, index: ix, cost: decodedBytes(ix, nil)})
	return ix, nil
}

// Page returns the entries of page ref: cached by ref.SHA256, else
// LoadPage. Errors: LoadPage's.
func (c *Cache) Page(ctx context.Context, st objstore.Store, ref PageRef) ([]Entry, error) {
	return c.page(ctx, st, ref, true)
}

// page is Page, which caches what it loads only when keep is true.
func (c *Cache) page(ctx context.Context, st objstore.Store, ref PageRef, keep bool) ([]Entry, error) {
	if it := c.get(ref.SHA256); it != nil && it.page != nil {
		return it.page, nil
	}
	es, err := LoadPage(ctx, st, ref)
	if err != nil {
		return nil, err
	}
	if keep {
		c.put(&cached{sha: ref.SHA256, page: es, cost: decodedBytes(nil, es)})
	}
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
// (without caching when c is nil). The pages of a
// manifest whose pages' bytes add up to more than c's bound are read
// without being cached (a cached page is still used): caching them would
// evict the manifest's own first pages, and everything else cached,
// before the next scan needs them again; so a scan holds one page at a
// time. A failure is yielded once, last.
func (c *Cache) All(ctx context.Context, st objstore.Store, ix *Index) func(yield func(Entry, error) bool) {
	return func(yield func(Entry, error) bool) {
		for _, e := range ix.Entries {
			if !yield(e, nil) {
				return
			}
		}
		var size int64
		for _, ref := range ix.Pages {
			size += ref.Size
		}
		keep := c != nil && size <= int64(c.max)
		for _, ref := range ix.Pages {
			es, err := c.page(ctx, st, ref, keep)
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
