/* The "Copy link" buttons (share.py): turns the query a callback wrote into the link's textbox into
   the page's full address and copies it to the clipboard where the browser allows (a denied
   permission is not an error: the box shows the link). An event's js with the textbox's value as
   input and output. Reads no DOM: only window.location. */
(query) => {
  if (!query || !String(query).startsWith('?')) return query;
  const url = window.location.origin + window.location.pathname + query;
  try { navigator.clipboard.writeText(url).catch(() => {}); } catch (err) {}
  return url;
}
