/* Selects a tab in the browser by its id (gr.Tab(id=...) in page.py; gradio renders it as the tab
   button's data-tab-id): a js-only event, so the Tabs is never a server event's output (context.py
   says why). Called with the tab's id: from the hidden textbox #sv-tab-request (links.py), or bound
   to one fixed tab (context.select_tab_js, the lessons). The tabs are then scrolled to the top of
   the screen: a shared link opened a phone at the page's header, the linked tab's content a screen
   below.
   Reads: button[role=tab][data-tab-id], written by gradio's Tabs, not by draw/. */
(tab) => {
  if (!tab) return;
  const button = document.querySelector(`button[role=tab][data-tab-id="${CSS.escape(String(tab))}"]`);
  if (!button) return;
  button.click();
  requestAnimationFrame(() => button.scrollIntoView({block: 'start', inline: 'nearest'}));
}
