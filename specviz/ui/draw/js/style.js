/* The page's one way to its stylesheet: called once when the page loads with the text of
   draw/styles.py's page_css() (bound by draw/scripts.py's called()), it adds a style element (id sv-style)
   to the document's head unless it is there already, so the styles hold however the page is served
   (python app.py, a Space, an in-process test server).
   Reads: #sv-style, the element this script itself creates. */
(css) => {
  if (document.getElementById('sv-style')) return [];
  const style = document.createElement('style');
  style.id = 'sv-style';
  style.textContent = css;
  document.head.appendChild(style);
  return [];
}
